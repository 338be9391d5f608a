package forward

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	hubv1 "github.com/kerf-dev/kerf/api/hub/v1"
	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/cluster/savings"
)

// SavingsReport is the leader's savings report for the hub: the figures
// cluster/savings.Summarize computes from recs, per namespace. A
// recommendation being deleted is left out. The window's rollbacks are
// left out too: the hub counts them from the actions it stores.
func SavingsReport(cluster string, recs []*v1alpha1.RightsizingRecommendation, now time.Time) hubv1.SavingsReport {
	live := make([]*v1alpha1.RightsizingRecommendation, 0, len(recs))
	for _, r := range recs {
		if r != nil && r.DeletionTimestamp == nil {
			live = append(live, r)
		}
	}
	rows := savings.Summarize(live, now, now)
	out := hubv1.SavingsReport{Cluster: cluster, Time: metav1.NewTime(now.UTC().Truncate(time.Millisecond)), Namespaces: make([]hubv1.NamespaceSavings, 0, len(rows))}
	for _, n := range rows {
		out.Namespaces = append(out.Namespaces, hubv1.NamespaceSavings{
			Namespace: n.Namespace, Workloads: n.Workloads, Unrecorded: n.Unrecorded,
			Manifest: wire(n.Manifest), InForce: wire(n.InForce), Recommended: wire(n.Recommended),
		})
	}
	return out
}

func wire(a savings.Amounts) hubv1.Amounts {
	return hubv1.Amounts{CPUMillis: a.CPUMillis, MemoryBytes: a.MemoryBytes}
}

// reportSavings sends the savings report when it is due. The figures are
// computed at most every SavingsEvery; they are sent when they differ
// from the last ones the hub took, or SavingsHeartbeat after those. A
// failure is logged and counted, and tried again SavingsEvery later; a
// refusal waits for a change or the heartbeat. It never fails the pass:
// the actions' delivery does not wait for the savings.
func (f *Forwarder) reportSavings(ctx context.Context, recs []*v1alpha1.RightsizingRecommendation, now time.Time) {
	if !f.savingsChecked.IsZero() && now.Sub(f.savingsChecked) < f.cfg.SavingsEvery {
		return
	}
	f.savingsChecked = now
	rep := SavingsReport(f.cfg.Cluster, recs, now)
	if f.savingsSent != nil && slices.Equal(rep.Namespaces, f.savingsSent) && now.Sub(f.savingsSentAt) < f.cfg.SavingsHeartbeat {
		return
	}
	err := f.putSavings(ctx, rep)
	var he *hubError
	switch {
	case err == nil:
		f.metrics.savings.WithLabelValues("delivered").Inc()
	case errors.As(err, &he) && he.status >= 400 && he.status < 500:
		f.metrics.savings.WithLabelValues("refused").Inc()
		f.log.Error("the hub refused the savings report; sent again at the next change or heartbeat", "namespaces", len(rep.Namespaces), "err", err)
	default:
		f.metrics.savings.WithLabelValues("failed").Inc()
		f.log.Warn("savings report failed; retrying", "retryIn", f.cfg.SavingsEvery.String(), "err", err)
		return
	}
	f.savingsSent, f.savingsSentAt = rep.Namespaces, now
}

// putSavings sends one report and requires a 200.
func (f *Forwarder) putSavings(ctx context.Context, rep hubv1.SavingsReport) error {
	_, err := f.request(ctx, http.MethodPut, "savings", fmt.Sprintf("the savings of %d namespaces", len(rep.Namespaces)), rep)
	return err
}
