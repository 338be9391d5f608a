package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/rest"

	"github.com/kerf-dev/kerf/cgroup"
	"github.com/kerf-dev/kerf/node/oom"
	"github.com/kerf-dev/kerf/node/report"
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
	// UsageInterval is how often containers' usage is read in full (see
	// Sampler.SetUsageInterval); 0 means DefaultUsageInterval. A value
	// below Interval reads it on every pass.
	UsageInterval time.Duration
	// Discovery is where the node's pods come from: auto, kubelet or
	// apiserver (DiscoveryModes); empty means auto.
	Discovery string
	// PodsAPISocket is the kubelet's Pods API socket; empty means
	// DefaultPodsAPISocket.
	PodsAPISocket string
	// NodeName is the agent's node, whose pods the apiserver informer
	// watches; the kubelet's Pods API needs none.
	NodeName string
	// Layout is how the kubelet names container cgroups.
	Layout cgroup.Layout
	// Kube returns the apiserver configuration of the informer (its
	// client is NewPodClient's); it is called only when the informer is
	// the source. Nil means no informer.
	Kube func() (*rest.Config, error)
}

// DefaultUsageInterval is how often the agent reads containers' usage in
// full by default. A usage read costs about as much as four cpu.stat reads,
// memory.stat's formatting most of it (docs/kernel.md), and the
// recommender it feeds works on minutes and hours, so every 10 s keeps the
// agent within its budget (docs/agent.md) while the passes between still
// sample the memory usage for the interval's peak.
const DefaultUsageInterval = 10 * time.Second

// Stream is where the agent sends what it sees for the leader: the agent's
// end of the stream (node/stream.Client). It is an interface here, on
// node/report's types, so that node/stream, below this package, need not
// import it; kerf-agent's SetStream call checks that a Client is a Stream.
type Stream interface {
	// Counters records one sampling pass's changed samples.
	Counters(samples []report.Sample)
	// OOM records an OOM kill resolved to a container of a pod.
	OOM(k oom.Kill, podUID, container string)
	// ContainerEvent records a container restart or termination that pod
	// discovery saw.
	ContainerEvent(ev report.ContainerEvent)
	// Run keeps the stream to the leader open until ctx ends.
	Run(ctx context.Context) error
}

// Agent is kerf-agent (docs/design.md section 5): it discovers the pods of
// its node, samples their containers' cpu.stat, runs the OOM source and
// counts the kills it resolves to containers, and streams all of it to the
// leader when given a Stream.
type Agent struct {
	log       *slog.Logger
	interval  time.Duration
	sampler   *Sampler // nil when the node's cgroups could not be read
	source    oom.Source
	counts    *oom.Counts
	kills     *prometheus.CounterVec
	sources   *prometheus.GaugeVec
	discovery *Discovery // nil without pod discovery
	pods      PodSource  // nil without pod discovery
	events    *prometheus.CounterVec
	// discoveryGauge is kerf_agent_discovery{source}.
	discoveryGauge *prometheus.GaugeVec
	stream         Stream          // nil without a leader to stream to
	changed        []report.Sample // reused by every pass
	// layout is the kubelet's cgroup layout, checked every
	// layoutCheckInterval; layoutProblem is kerf_agent_layout_problem.
	layout        cgroup.Layout
	hierarchy     *cgroup.Hierarchy // nil when the node's cgroups could not be read
	layoutProblem *prometheus.GaugeVec
	layoutChecked time.Time
	notFoundLog   time.Time // when a cgroup not found was last logged
	// unreadable is set while the node's cgroups or the pods' cgroup
	// cannot be found: Ready says false.
	unreadable atomic.Bool
}

// Ready reports whether the agent can read the node's containers: a
// hierarchy with a cpu controller and the pods' cgroup its layout names
// (CheckLayout). kerf-agent serves it on /readyz, so an agent told the
// wrong --cgroup-driver shows as not ready, on its node, in kubectl get
// pods and kubectl kerf status.
func (a *Agent) Ready() bool { return !a.unreadable.Load() }

// layoutCheckInterval is how often the agent looks again for the pods'
// cgroup (CheckLayout), and how often at most it logs containers whose
// cgroup was not found.
const layoutCheckInterval = time.Minute

// OOMSource names the OOM source in use: bpf, cgroup or kmsg.
func (a *Agent) OOMSource() string { return a.source.Name() }

// Discovery names the pod discovery source in use: kubelet, apiserver, or
// "" for none.
func (a *Agent) Discovery() string {
	if a.pods == nil {
		return ""
	}
	return a.pods.Name()
}

// SetStream makes the agent send each pass's changed counters, every OOM
// kill resolved to a tracked container and every container restart or
// termination pod discovery sees to the leader through s; Run runs s.
// Call it before Run.
func (a *Agent) SetStream(s Stream) { a.stream = s }

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
	if d, ok := src.(interface{ Dropped() (uint64, error) }); ok {
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "kerf_agent_oom_ringbuf_dropped_total",
			Help: "OOM events the BPF program could not put in its ring buffer (full): the kill is still counted from the cgroup's counter, without its pid and time.",
		}, func() float64 {
			n, err := d.Dropped()
			if err != nil {
				return 0
			}
			return float64(n)
		}))
	}
	a.sources.WithLabelValues(src.Name(), src.Detail()).Set(1)
	a.layout = cfg.Layout
	a.layoutProblem = newLayoutProblemGauge()
	reg.MustRegister(a.layoutProblem)
	log.Info("OOM source chosen", "source", src.Name(), "detail", src.Detail(), "asked", cfg.OOMSource)
	if h, err := cgroup.Detect(); err != nil {
		log.Warn("cpu.stat sampling disabled", "err", err)
		a.layoutProblem.WithLabelValues(ProblemNoCgroups).Set(1)
		a.unreadable.Store(true)
	} else {
		a.hierarchy = h
		a.sampler = NewSampler(h)
		usage := cfg.UsageInterval
		if usage <= 0 {
			usage = DefaultUsageInterval
		}
		a.sampler.SetUsageInterval(usage)
		if !a.sampler.UsageEnabled() {
			log.Warn("usage reading disabled: the node has no memory controller or no CPU accounting")
		}
		reg.MustRegister(NewCollector(a.sampler, a.counts))
		a.checkLayout(time.Now(), Pass{}) // said at start, and Ready from the first probe
	}
	if err := a.chooseDiscovery(cfg, reg); err != nil {
		_ = a.source.Close()
		return nil, err
	}
	return a, nil
}

// chooseDiscovery picks the pod source cfg asks for (design section 5: the
// kubelet's Pods API, else the apiserver informer), logs it and reports it
// as kerf_agent_discovery{source}.
func (a *Agent) chooseDiscovery(cfg Config, reg prometheus.Registerer) error {
	mode := cfg.Discovery
	if mode == "" {
		mode = DiscoveryAuto
	}
	if !slices.Contains(DiscoveryModes, mode) {
		return fmt.Errorf("--discovery %q: must be one of %s", cfg.Discovery, strings.Join(DiscoveryModes, ", "))
	}
	socket := cfg.PodsAPISocket
	if socket == "" {
		socket = DefaultPodsAPISocket
	}
	a.discoveryGauge = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "kerf_agent_discovery",
		Help: "The pod discovery source in use (1): kubelet (the kubelet's Pods API) or apiserver (an informer); 0 for the other.",
	}, []string{"source"})
	a.events = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kerf_agent_container_events_total",
		Help: "Container restarts and terminations pod discovery saw, by termination reason (none: a restart count change alone).",
	}, []string{"reason"})
	gauge := a.discoveryGauge
	reg.MustRegister(gauge, a.events)
	for _, s := range []string{DiscoveryKubelet, DiscoveryAPIServer} {
		gauge.WithLabelValues(s).Set(0)
	}
	if a.sampler == nil {
		a.log.Warn("no pod discovery: the node's cgroups were not found, so no container is sampled")
		return nil
	}
	informer := func() (PodSource, error) {
		switch {
		case cfg.NodeName == "":
			return nil, errors.New("--discovery=apiserver: the node name is empty (set --node-name or NODE_NAME)")
		case cfg.Kube == nil:
			return nil, errors.New("--discovery=apiserver: no apiserver client")
		}
		kc, err := cfg.Kube()
		if err != nil {
			return nil, fmt.Errorf("--discovery=apiserver: %w", err)
		}
		client, err := NewPodClient(kc)
		if err != nil {
			return nil, fmt.Errorf("--discovery=apiserver: %w", err)
		}
		return &InformerPods{Client: client, NodeName: cfg.NodeName, Log: a.log}, nil
	}
	var why error
	switch mode {
	case DiscoveryKubelet:
		if err := ProbePodsAPI(context.Background(), socket, 0); err != nil {
			a.log.Warn("the kubelet's Pods API does not answer yet; watching it anyway (--discovery=kubelet)", "err", err)
		}
		a.pods = &KubeletPods{Socket: socket, Log: a.log}
	case DiscoveryAPIServer:
		src, err := informer()
		if err != nil {
			return err
		}
		a.pods = src
	case DiscoveryAuto:
		if why = ProbePodsAPI(context.Background(), socket, 0); why == nil {
			a.pods = &KubeletPods{Socket: socket, Log: a.log}
			break
		}
		if cfg.NodeName == "" || cfg.Kube == nil {
			a.log.Warn("no pod discovery: the kubelet's Pods API does not answer and the informer needs a node name and an apiserver client; no container is sampled",
				"podsAPIErr", why)
			return nil
		}
		src, err := informer()
		if err != nil {
			return err
		}
		a.pods = src
	}
	a.discovery = &Discovery{Layout: cfg.Layout, Sampler: a.sampler, Log: a.log, Events: a.containerEvent}
	gauge.WithLabelValues(a.pods.Name()).Set(1)
	a.log.Info("pod discovery chosen", "source", a.pods.Name(), "asked", mode, "podsAPISocket", socket,
		"node", cfg.NodeName, "podsAPIErr", why)
	return nil
}

// containerEvent logs and counts a container restart or termination that
// pod discovery saw, and forwards it to the leader, which can act on it
// before the apiserver has the pod status (docs/design.md section 3).
func (a *Agent) containerEvent(ev report.ContainerEvent) {
	reason := "none"
	attrs := []any{"namespace", ev.Namespace, "pod", ev.Pod, "podUID", ev.PodUID, "container", ev.Container,
		"restartCount", ev.RestartCount}
	if t := ev.Terminated; t != nil {
		reason = t.Reason
		attrs = append(attrs, "reason", t.Reason, "exitCode", t.ExitCode, "finishedAt", t.FinishedAt.Time)
	}
	a.events.WithLabelValues(reason).Inc()
	a.log.Info("container event", attrs...)
	if a.stream != nil {
		a.stream.ContainerEvent(ev)
	}
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
			p := a.sampler.Sample(now)
			if p.Err != nil {
				a.log.Debug("cpu.stat sampling pass had errors", "errors", p.Errors, "err", p.Err)
			}
			a.checkLayout(now, p)
			a.reconcileOOM()
			if a.stream != nil {
				a.changed = a.sampler.Changed(a.changed[:0])
				a.stream.Counters(a.changed)
			}
		}
	}
}

// checkLayout says when the agent cannot read the node's containers: it
// looks for the pods' cgroup every layoutCheckInterval, and marks a pass
// that found none of the cgroups it looked for, logging the path.
func (a *Agent) checkLayout(now time.Time, p Pass) {
	if a.layoutChecked.IsZero() || now.Sub(a.layoutChecked) >= layoutCheckInterval {
		a.layoutChecked = now
		err := CheckLayout(a.hierarchy, a.layout)
		if err != nil {
			a.log.Warn("the agent cannot read the node's containers", "err", err)
		}
		a.layoutProblem.WithLabelValues(ProblemKubepodsNotFound).Set(boolGauge(err != nil))
		a.unreadable.Store(err != nil)
	}
	switch {
	case p.NotFound > 0 && p.Read == 0:
		a.layoutProblem.WithLabelValues(ProblemContainersNotFound).Set(1)
	case p.Read > 0:
		a.layoutProblem.WithLabelValues(ProblemContainersNotFound).Set(0)
	}
	if p.NotFound > 0 && (a.notFoundLog.IsZero() || now.Sub(a.notFoundLog) >= layoutCheckInterval) {
		a.notFoundLog = now
		a.log.Warn("running containers' cgroups not found: if this repeats, --cgroup-driver or --kubelet-cgroup-root is not the kubelet's",
			"notFound", p.NotFound, "read", p.Read, "path", p.NotFoundPath, "driver", a.layout.Driver, "kubeletCgroupRoot", rootFlag(a.layout))
	}
}

func boolGauge(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// reconcileOOM reconciles each tracked container's OOM kill count with the
// kernel's cumulative counter the pass read, so that the count is
// absolute (kills made while the agent was down, or whose event was
// dropped, included), and forgets the counts of cgroups no longer tracked.
func (a *Agent) reconcileOOM() {
	a.sampler.OOMKillCounts(func(p string, n uint64) { a.counts.Reconcile(p, n) })
	a.counts.Retain(a.sampler.Tracks)
}

// Run runs the agent until ctx is done: pod discovery, sampling, the
// stream and the OOM source. It returns the first error of a part that
// stops by itself.
func (a *Agent) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait()
		if a.sampler != nil {
			_ = a.sampler.Close()
		}
		_ = a.source.Close()
	}()
	errc := make(chan error, 3)
	goRun := func(name string, run func(context.Context) error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := run(ctx); err != nil && ctx.Err() == nil {
				errc <- fmt.Errorf("%s: %w", name, err)
				cancel()
			}
		}()
	}
	if a.sampler != nil {
		goRun("sampling", func(ctx context.Context) error { a.sample(ctx); return nil })
	}
	if a.discovery != nil {
		goRun("pod discovery", func(ctx context.Context) error { return a.discovery.Run(ctx, a.pods) })
	}
	if a.stream != nil {
		goRun("stream", a.stream.Run)
	}
	err := a.runOOM(ctx)
	select {
	case e := <-errc:
		return e
	default:
	}
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// runOOM runs the OOM source until ctx is done.
func (a *Agent) runOOM(ctx context.Context) error {
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
