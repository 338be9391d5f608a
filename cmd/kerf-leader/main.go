// Command kerf-leader is Kerf's cluster-level leader (a Deployment with one
// elected replica): it applies rightsizing recommendations, runs the health
// watch over the workloads they touch and rolls harmful changes back.
// See docs/ and DESIGN.md sections 2-4.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/kerf-dev/kerf/internal/endpoints"
)

func main() {
	fs := flag.NewFlagSet("kerf-leader", flag.ContinueOnError)
	metricsAddr := fs.String("metrics-addr", ":9401", "address of the /metrics, /healthz and /readyz endpoints")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: kerf-leader [flags]\n\n"+
			"Kerf's leader: applies rightsizing recommendations, watches the health of\n"+
			"each change and rolls harmful changes back.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(os.Args[1:]); err != nil {
		if err == flag.ErrHelp {
			os.Exit(0)
		}
		os.Exit(2)
	}
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	log.Info("kerf-leader starting", "metricsAddr", *metricsAddr)
	if err := endpoints.New(reg, nil).Serve(ctx, *metricsAddr); err != nil {
		log.Error("kerf-leader stopped", "err", err)
		os.Exit(1)
	}
	log.Info("kerf-leader stopped")
}
