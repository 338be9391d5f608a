package node

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kerf-dev/kerf/cgroup"
	"github.com/kerf-dev/kerf/node/oom"
)

// Config is the agent's configuration, from kerf-agent's flags.
type Config struct {
	// OOMSource is one of oom.Kinds: auto, bpf, cgroup or kmsg.
	OOMSource string
	// CgroupRoot is the kubelet's --cgroup-root subtree of pods, e.g.
	// /kubepods; empty finds it.
	CgroupRoot string
	// Interval is how often containers' cpu.stat is sampled; 0 means 1 s.
	Interval time.Duration
}

// Agent is kerf-agent: today it runs the OOM source, counts the kills it
// resolves to containers and samples the cpu.stat of the containers its
// Sampler is given.
type Agent struct {
	log      *slog.Logger
	interval time.Duration
	sampler  *Sampler // nil when the node's cgroups could not be read
	source   oom.Source
	counts   *oom.Counts
	kills    *prometheus.CounterVec
	sources  *prometheus.GaugeVec
	stream   *StreamClient // nil without a leader to stream to
	changed  []Sample      // reused by every pass
}

// OOMSource names the OOM source in use: bpf, cgroup or kmsg.
func (a *Agent) OOMSource() string { return a.source.Name() }

// SetStream makes the agent send each pass's changed counters and every
// OOM kill resolved to a tracked container to the leader. Call it before
// Run.
func (a *Agent) SetStream(c *StreamClient) { a.stream = c }

// New opens the OOM source cfg asks for (the best one the node allows, for
// auto), logs why better ones were not taken and registers the agent's
// metrics with reg.
func New(cfg Config, log *slog.Logger, reg prometheus.Registerer) (*Agent, error) {
	src, skipped, err := oom.Open(cfg.OOMSource, oom.Options{Root: cfg.CgroupRoot})
	for _, e := range skipped {
		log.Warn("OOM source unavailable", "err", e)
	}
	if err != nil {
		return nil, fmt.Errorf("open OOM source: %w", err)
	}
	a := &Agent{
		log:      log,
		interval: cfg.Interval,
		source:   src,
		counts:   oom.NewCounts(),
		kills: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kerf_agent_oom_kills_total",
			Help: "OOM kills the agent's OOM source delivered, by whether they resolved to a pod container.",
		}, []string{"source", "resolved"}),
		sources: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "kerf_agent_oom_source",
			Help: "The OOM source in use (1), with how it works here.",
		}, []string{"source", "detail"}),
	}
	if a.interval <= 0 {
		a.interval = time.Second
	}
	reg.MustRegister(a.kills, a.sources)
	a.sources.WithLabelValues(src.Name(), src.Detail()).Set(1)
	log.Info("OOM source chosen", "source", src.Name(), "detail", src.Detail(), "asked", cfg.OOMSource)
	if h, err := cgroup.Detect(); err != nil {
		log.Warn("cpu.stat sampling disabled", "err", err)
	} else {
		a.sampler = NewSampler(h)
		reg.MustRegister(NewCollector(a.sampler, a.counts))
	}
	return a, nil
}

// Sampler returns the agent's sampler, for pod discovery to Set the
// containers to sample; nil when the node's cgroups could not be read.
func (a *Agent) Sampler() *Sampler { return a.sampler }

// sample runs a sampling pass every interval until ctx is done.
func (a *Agent) sample(ctx context.Context) {
	t := time.NewTicker(a.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			if p := a.sampler.Sample(now); p.Err != nil {
				a.log.Debug("cpu.stat sampling pass had errors", "errors", p.Errors, "err", p.Err)
			}
			if a.stream != nil {
				a.changed = a.sampler.Changed(a.changed[:0])
				a.stream.Counters(a.changed)
			}
		}
	}
}

// Run runs the agent until ctx is done.
func (a *Agent) Run(ctx context.Context) error {
	defer a.source.Close()
	if a.sampler != nil {
		defer a.sampler.Close()
		sctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { defer close(done); a.sample(sctx) }()
		defer func() { cancel(); <-done }()
	}
	return a.source.Run(ctx, func(k oom.Kill) {
		a.counts.Observe(k)
		resolved := k.ContainerID != ""
		a.kills.WithLabelValues(k.Source, fmt.Sprint(resolved)).Add(float64(k.Count))
		a.log.Info("OOM kill", "source", k.Source, "pid", k.PID, "comm", k.Comm, "cgroup", k.Cgroup,
			"podUID", k.PodUID, "containerID", k.ContainerID, "count", k.Count, "kernelNS", k.KernelNS)
		if a.stream != nil && a.sampler != nil {
			if c, ok := a.sampler.ByCgroup(k.Cgroup); ok {
				a.stream.OOM(k, c.PodUID, c.Name)
			}
		}
	})
}
