package hub

import (
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kerf-dev/kerf/hub/store"
)

var actionsDesc = prometheus.NewDesc("kerf_actions_total",
	"Actions stored by the hub, each counted once however often it was delivered: by cluster, type, reason and resource (one per resource the action touched; \"\" when none).",
	[]string{"cluster", "type", "reason", "resource"}, nil)

var scrapeErrorDesc = prometheus.NewDesc("kerf_hub_metrics_read_error",
	"1 when the last scrape could not read the action counters from the database.", nil, nil)

// actionsCollector reads kerf_actions_total from the database at each
// scrape. The counters are rows incremented in the transaction that first
// stores an action, so every replica serves the same values, a replay adds
// nothing, and retention does not lower them.
type actionsCollector struct {
	store *store.Store
	log   *slog.Logger
}

func (c *actionsCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- actionsDesc
	ch <- scrapeErrorDesc
}

func (c *actionsCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	counts, err := c.store.Counts(ctx)
	if err != nil {
		c.log.Error("read action counters for /metrics", "err", err)
		ch <- prometheus.MustNewConstMetric(scrapeErrorDesc, prometheus.GaugeValue, 1)
		return
	}
	ch <- prometheus.MustNewConstMetric(scrapeErrorDesc, prometheus.GaugeValue, 0)
	for _, n := range counts {
		ch <- prometheus.MustNewConstMetric(actionsDesc, prometheus.CounterValue, float64(n.Value), n.Cluster, n.Type, n.Reason, n.Resource)
	}
}
