package recommender

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/cluster/healthwatch"
	"github.com/kerf-dev/kerf/cluster/policy"
	"github.com/kerf-dev/kerf/cluster/recommend"
	"github.com/kerf-dev/kerf/cluster/signals"
	"github.com/kerf-dev/kerf/cluster/workload"
)

// Config configures the leader's recommender loop
// (docs/recommender.md). Whether a workload is recommended for, and how, is
// its policy's spec.recommend; this only tunes the loop.
type Config struct {
	// Period is how often the loop reads the agents' usage readings from
	// signals.Usage; zero means DefaultPeriod. It must stay
	// within the store's span (signals.UsageSamples readings) for no
	// reading to be missed.
	Period time.Duration
	// MaxContainers bounds the workload containers whose history is kept;
	// zero means DefaultMaxContainers. Beyond it new ones are
	// not tracked (and a warning says so).
	MaxContainers int
	// CheckpointInterval is how long a workload's RightsizingCheckpoint
	// waits before it is written again (when its history changed); zero
	// means DefaultCheckpointInterval.
	CheckpointInterval time.Duration
	// CheckpointWrites bounds the checkpoint writes and deletes of one
	// pass; zero means DefaultCheckpointWrites.
	CheckpointWrites int
	// Workers is how many recommendations are written at once, 1 to
	// MaxWorkers; zero means DefaultWorkers.
	Workers int
}

// Defaults of Config.
const (
	// DefaultPeriod reads every reading of the agents' default
	// 10 s usage interval well within the store's four.
	DefaultPeriod = 10 * time.Second
	// DefaultMaxContainers bounds the history to about 100 MB
	// at the core's worst case of two full histograms per container.
	DefaultMaxContainers = 100_000
)

// Loop is the leader's recommender loop, a manager Runnable only the
// elected leader runs. It covers the workloads whose policy enables
// spec.recommend.
//   - Every Period it feeds the usage readings of their pods into per
//     workload and container states (cluster/recommend).
//   - Every policy interval it makes their recommendations and writes
//     them.
type Loop struct {
	client client.Client
	usage  *signals.Usage
	kernel *signals.Kernel
	now    func() time.Time
	log    *slog.Logger
	period time.Duration
	max    int

	// base is the defaults' model; models are the models of the
	// policies' parameters, at most maxModels (base included), each
	// workload's states fed and recommended with its own (model).
	base   *recommend.Model
	models map[recommend.Params]*recommend.Model
	// modelsPruned is the pass that last dropped the models no workload
	// uses, at most once a pass. modelMetrics are the counts of histories
	// restarted under a new model and of workloads that fell back to the
	// defaults' model.
	modelsPruned uint64
	modelMetrics *modelMetrics
	// passModels are this pass's (passModelsAt) models by the policies'
	// shared Resolved (modelOf).
	passModels   map[*policy.Resolved]modelChoice
	passModelsAt uint64

	workloads map[workload.Ref]*trackedWorkload
	instances map[instanceKey]*trackedInstance
	// tracked is the count of container states over every workload, and
	// trackedGauge its metric.
	tracked      int
	trackedGauge prometheus.Gauge
	tick         uint64
	// steps times each pass's steps (pass).
	steps *prometheus.HistogramVec

	// The checkpoints (checkpoint.go). reader reads them from the
	// apiserver in namespaces, the ones the leader watches (all when
	// empty). Then come their interval and writes per pass, whether they
	// were loaded, the workloads forgotten whose checkpoint is to be
	// deleted, and when they were last collected.
	reader        client.Reader
	namespaces    []string
	ckptInterval  time.Duration
	ckptWrites    int
	ckptMetrics   *checkpointMetrics
	ckptLoaded    bool
	dropped       map[workload.Ref]bool
	ckptCollected time.Time
	ckptDue       []workload.Ref
	ckptBuf       []byte
	// vpa is the source of the workloads whose policy says source VPA.
	vpa *vpaSource
	// writers writes the recommendations (writes.go).
	writers *writers
	// views reads the workloads' objects the pass only reads: from the
	// leader's cache, views of its own objects, not copies
	// (workload.ReadOnly). A copy of every workload each pass was the
	// largest part of the leader's garbage at 25,000 workloads.
	views client.Reader
	// scratch is the room the pass reads workloads' objects into, and
	// readings the room for a container's usage readings.
	scratch  workload.Scratch
	readings []signals.UsageSample
	// replicaSets reads a ReplicaSet's metadata into scratch, for a pod's
	// workload (workload.ReplicaSetMetaOf on views).
	replicaSets workload.ReplicaSetReader
	// pods is the room feed lists a namespace's pods into: the leader's
	// cache writes its views into the items already there. A new list
	// each namespace was a tenth of what the leader allocated at 25,000
	// workloads. Room past maxPodRoom items is not kept between passes.
	pods corev1.PodList
	// windows is the room throttling reads a workload's throttling into.
	windows map[string]healthwatch.ThrottleWindow
	// existing is the room recommendFor reads a recommendation's view
	// into, cleared once it has decided.
	existing v1alpha1.RightsizingRecommendation
	// fed is the map feed returns, cleared for each namespace: one
	// namespace's workloads, where a new map each was 2 % of what the
	// leader allocated at 25,000 workloads.
	fed map[workload.Ref]*trackedWorkload
}

// maxPodRoom bounds the items of room the pass keeps between passes for
// a namespace's pods (Loop.pods), about 1 KB each (a corev1.Pod). A
// namespace with more has its list allocated each pass.
const maxPodRoom = 2048

// trackedWorkload is the history of one workload's containers.
type trackedWorkload struct {
	containers containerStates
	// model is the model its states are fed and recommended with: its
	// policy's (model), or the defaults' when none could be had
	// (fellBack: the bound of distinct models was reached).
	model *recommend.Model
	// recommended is when its recommendation was last made.
	recommended stamp
	fellBack    bool
	// killed is true when an OOM kill was recorded since then: the
	// recommendation is due at once, not an interval later.
	killed bool
	// gen counts the restarts of its history (adopt): an instance fed
	// under an older one has its peak window cleared.
	gen  uint32
	seen uint64
	// pods are its running pods in the namespace the pass is reading (nil
	// once the pass has gone on to the next).
	pods []*corev1.Pod
	// running is what its containers run with over its running pods, read
	// in this pass (runningResources).
	running []runningContainer
	// throttledTo is the end of the throttling window last read.
	throttledTo stamp
	// ckpt is where its checkpoint is.
	ckpt checkpointMark
}

// instanceKey names one container of one pod.
type instanceKey struct {
	pod       types.UID
	container string
}

// trackedInstance is what the loop keeps per running container. It holds
// where it is in the usage readings and in its OOM kills, its previous CPU
// counter (a rate needs two) and its memory peak window.
type trackedInstance struct {
	cursor stamp
	cpuAt  stamp
	cpu    time.Duration
	peak   recommend.PeakWindow
	// kills is the count of the kernel store's OOM kills of the container
	// already recorded. statusOOM is the finish time of the pod status's
	// last OOM termination recorded. Both are counts and times the reports
	// carry. So a kill that reaches the store or the cache after the pass
	// that would have covered its time is still recorded, once.
	kills int32
	// gen is its workload's gen when it was last fed (trackedWorkload).
	gen       uint32
	statusOOM stamp
	// limit is the container's memory limit in bytes as the previous pass
	// saw it (0: none), and passAt that pass's time: a kill found now
	// happened under the lowest limit since (killLimit).
	limit  int64
	passAt stamp
	seen   uint64
}

// New returns the loop over the usage and kernel stores, with
// its metrics on reg; reader reads its checkpoints in namespaces (all
// when empty).
func New(c client.Client, reader client.Reader, namespaces []string, sig *signals.Stores, cfg Config, now func() time.Time, reg prometheus.Registerer, log *slog.Logger) (*Loop, error) {
	if cfg.Workers < 0 || cfg.Workers > MaxWorkers {
		return nil, fmt.Errorf("recommender: workers (%d) must be from 1 to %d, or 0 for %d", cfg.Workers, MaxWorkers, DefaultWorkers)
	}
	if cfg.Workers == 0 {
		cfg.Workers = DefaultWorkers
	}
	base, err := recommend.NewModel(recommend.DefaultParams())
	if err != nil {
		return nil, fmt.Errorf("recommender: %w", err)
	}
	gauge := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "kerf_recommender_containers",
		Help: "Workload containers whose usage history the recommender keeps (bounded by its maximum).",
	})
	if err := reg.Register(gauge); err != nil {
		return nil, fmt.Errorf("register the recommender's metric: %w", err)
	}
	steps := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "kerf_recommender_pass_seconds",
		Help:    "How long the recommender's passes took, by step (policies, feed, throttling, prune, recommend, checkpoint; feed and throttling run per namespace, summed) and in total.",
		Buckets: prometheus.ExponentialBuckets(0.001, 4, 8),
	}, []string{"step"})
	if err := reg.Register(steps); err != nil {
		return nil, fmt.Errorf("register the recommender's pass metric: %w", err)
	}
	ckm, err := newCheckpointMetrics(reg)
	if err != nil {
		return nil, err
	}
	mm, err := newModelMetrics(reg)
	if err != nil {
		return nil, err
	}
	if cfg.CheckpointInterval <= 0 {
		cfg.CheckpointInterval = DefaultCheckpointInterval
	}
	if cfg.CheckpointWrites <= 0 {
		cfg.CheckpointWrites = DefaultCheckpointWrites
	}
	vpa, err := newVPASource(c, reg, log.With("component", "recommender"))
	if err != nil {
		return nil, err
	}
	writers, err := newWriters(c, cfg.Workers, reg, log.With("component", "recommender"))
	if err != nil {
		return nil, err
	}
	if cfg.Period <= 0 {
		cfg.Period = DefaultPeriod
	}
	if cfg.MaxContainers <= 0 {
		cfg.MaxContainers = DefaultMaxContainers
	}
	if now == nil {
		now = time.Now
	}
	l := &Loop{
		client: c, views: workload.ReadOnly(c), usage: sig.Usage, kernel: sig.Kernel, now: now, log: log.With("component", "recommender"),
		period: cfg.Period, max: cfg.MaxContainers, base: base,
		models: map[recommend.Params]*recommend.Model{base.Params(): base}, modelMetrics: mm, passModels: map[*policy.Resolved]modelChoice{},
		workloads: map[workload.Ref]*trackedWorkload{}, instances: map[instanceKey]*trackedInstance{},
		windows: map[string]healthwatch.ThrottleWindow{}, fed: map[workload.Ref]*trackedWorkload{}, trackedGauge: gauge, steps: steps,
		reader: reader, namespaces: namespaces, ckptInterval: cfg.CheckpointInterval, ckptWrites: cfg.CheckpointWrites,
		ckptMetrics: ckm, dropped: map[workload.Ref]bool{}, vpa: vpa, writers: writers,
	}
	l.replicaSets = workload.ReplicaSetMetaOf(l.views, &l.scratch)
	return l, nil
}

// NeedLeaderElection makes only the elected leader run the loop: a
// standby's recommendations would race the leader's.
func (r *Loop) NeedLeaderElection() bool { return true }

// Start runs the loop until ctx ends: it resumes from the checkpoints
// before its first pass, and writes them at the end. A failed pass (or
// load) is logged and the next one tries again.
func (r *Loop) Start(ctx context.Context) error {
	t := time.NewTicker(r.period)
	defer t.Stop()
	defer r.flushCheckpoints()
	for {
		if !r.ckptLoaded {
			if err := r.loadCheckpoints(ctx); err != nil && ctx.Err() == nil {
				r.log.Warn("recommender checkpoints not loaded; tried again next pass", "err", err)
			} else {
				r.ckptLoaded = true
			}
		}
		if err := r.pass(ctx); err != nil && ctx.Err() == nil {
			r.log.Warn("recommender pass failed", "err", err)
		}
		r.trackedGauge.Set(float64(r.tracked))
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// resolvedWorkload is one pass's view of a workload: its object's UID and
// the policy that governs it when that policy enables spec.recommend. The
// policy's Resolved is shared by the workloads it governs (read only); the
// object itself is read again only when a recommendation is due, so that a
// pass does not hold every workload's object at once.
type resolvedWorkload struct {
	uid      types.UID
	resolved *policy.Resolved
	// modelErr is why the policy's parameters gave no model (the
	// workload's states keep theirs, and nothing is recommended).
	modelErr error
}

// pass is one pass of the loop, in named steps. Each is timed in
// kerf_recommender_pass_seconds{step}, as the VPA recommender's RunOnce
// times its own:
//   - policies: read the policies. When none enables spec.recommend, the
//     loop forgets every history, reads no pods and goes to checkpoint.
//   - feed: read the running pods' new usage readings and OOM kills into
//     their workloads' states.
//   - throttling: feed each workload's CFS throttling ratio.
//   - prune: forget the pods no longer listed and the workloads gone.
//   - recommend: make and write the recommendations that are due.
//   - checkpoint: write the checkpoints that are due, delete the stale.
//
// feed and throttling run for each namespace in turn, and let its pods go
// before the next is listed: a pass holds one namespace's pods, not the
// cluster's (they were its largest part at 25,000 workloads). Each step's
// time is its sum over the namespaces.
func (r *Loop) pass(ctx context.Context) error {
	now := r.now()
	r.tick++
	timer := startSteps(r.steps)
	defer timer.total()
	pols, err := policy.Gatherer{Reader: r.client}.All(ctx)
	timer.step("policies")
	if err != nil {
		return err
	}
	if !pols.AnyRecommends() {
		// Nothing is recommended for: keep no history and read no pods.
		clear(r.workloads)
		clear(r.instances)
		r.tracked = 0
		r.checkpoint(ctx, pols, nil, now)
		timer.step("checkpoint")
		return nil
	}
	resolved := map[workload.Ref]*resolvedWorkload{}
	full := false
	defer r.releasePods()
	for _, ns := range r.passNamespaces(pols) {
		fed, nsFull, err := r.feed(ctx, pols, ns, resolved, now)
		timer.step("feed")
		if err != nil {
			return err
		}
		full = full || nsFull
		r.throttling(fed, now)
		timer.step("throttling")
		for _, tw := range fed {
			tw.pods = nil
		}
	}
	if full {
		r.log.Warn("recommender tracks its maximum of containers; new ones are not recommended for", "maxContainers", r.max)
	}
	r.prune(ctx)
	timer.step("prune")
	r.recommendDue(ctx, resolved, now)
	timer.step("recommend")
	// The count is known before the checkpoint writes (which take time).
	r.trackedGauge.Set(float64(r.tracked))
	r.checkpoint(ctx, pols, resolved, now)
	timer.step("checkpoint")
	return nil
}

// passNamespaces are the namespaces a pass reads pods in, one after
// another: the leader's watched namespaces, or every namespace when it
// watches all.
func (r *Loop) passNamespaces(pols *policy.Policies) []string {
	if len(r.namespaces) > 0 {
		return r.namespaces
	}
	return pols.Namespaces()
}

// feed reads the running pods' new usage readings and OOM kills in
// namespace ns into their workloads' states, and what their containers
// run with. It adds the workloads it resolves to resolved (nil for one
// whose policy does not enable spec.recommend). It returns those it fed,
// each holding its pods until the caller lets them go, in a map valid
// until its next call (Loop.fed), and whether a container was not
// tracked for the bound on containers.
func (r *Loop) feed(ctx context.Context, pols *policy.Policies, ns string, resolved map[workload.Ref]*resolvedWorkload, now time.Time) (fed map[workload.Ref]*trackedWorkload, full bool, err error) {
	// Views, only read: the leader's cache holds pods in a form of its
	// own (cluster/cachestore/pod.go), and a copy of every pod each pass
	// was the whole pods' size again in garbage.
	pods := &r.pods
	if err := r.client.List(ctx, pods, client.InNamespace(ns), client.UnsafeDisableDeepCopy); err != nil {
		return nil, false, fmt.Errorf("list pods in %s: %w", ns, err)
	}
	fed = r.fed
	clear(fed)
	for i := range pods.Items {
		pod := &pods.Items[i]
		if pod.DeletionTimestamp != nil || pod.Status.Phase != corev1.PodRunning {
			continue
		}
		// The pod's workload, from its ReplicaSet's metadata: a view of
		// the leader's cache, no map of pods to workloads kept between
		// passes (5 MB at 25,000 workloads).
		ref, found, err := workload.OfWith(ctx, pod, r.replicaSets)
		if err != nil || !found {
			continue // a ReplicaSet the cache has not seen yet is found on a later pass
		}
		rw, seen := resolved[ref]
		if !seen {
			rw = r.resolve(ctx, pols, ref)
			resolved[ref] = rw
		}
		if rw == nil {
			r.forget(ref)
			continue
		}
		tw := r.workloads[ref]
		if tw == nil {
			tw = &trackedWorkload{}
			r.workloads[ref] = tw
		}
		if tw.seen != r.tick {
			tw.seen, tw.pods, tw.running = r.tick, tw.pods[:0], tw.running[:0]
			r.adopt(ref, tw, rw, now)
		}
		fed[ref] = tw
		tw.pods = append(tw.pods, pod)
		tw.running = foldRunning(tw.running, pod)
		for _, c := range entriesOf(&pod.Spec) {
			st := tw.containers.get(c.Name)
			if st == nil {
				if r.tracked >= r.max {
					full = true
					continue
				}
				st = tw.containers.add(c.Name, recommend.ContainerState{})
				r.tracked++
			}
			if r.ingest(ctx, ref, pod, c, tw, st, now) {
				tw.killed = true
			}
		}
	}
	return fed, full, nil
}

// releasePods ends the pass's use of its pods' room (Loop.pods). The
// items are cleared, so that they pin no object the cache has since
// replaced, and kept as room for the next pass when there are at most
// maxPodRoom of them.
func (r *Loop) releasePods() {
	items := r.pods.Items
	if cap(items) > maxPodRoom {
		items = nil
	}
	clear(items[:cap(items)])
	r.pods = corev1.PodList{Items: items[:0]}
}

// recommendDue makes and writes the due recommendations of the workloads
// seen in this pass. One is due when its policy's interval elapsed since
// the last, or at once after an OOM kill: each kill waited for is a
// restart. It decides them one by one and writes them on the pool's
// workers (writes.go); it returns once every write has ended, so the
// recommend step's time covers both.
func (r *Loop) recommendDue(ctx context.Context, resolved map[workload.Ref]*resolvedWorkload, now time.Time) {
	batch := r.writers.start(ctx)
	for ref, tw := range r.workloads {
		if ctx.Err() != nil {
			break // the leader stops: what is left is the next leader's
		}
		rw := resolved[ref]
		if rw == nil || tw.seen != r.tick {
			continue
		}
		// Resolved specs are defaulted.
		if !tw.recommended.IsZero() && now.Sub(tw.recommended.Time()) < rw.resolved.Spec.Recommend.Interval.Duration && !tw.killed {
			continue
		}
		write, err := r.recommendFor(ctx, ref, rw, tw, now)
		switch {
		case errors.Is(err, errNoneReady):
			continue // tried again next pass, not an interval later
		case err != nil:
			r.log.Warn("recommendation not written", "workload", ref.String(), "namespace", ref.Namespace, "err", err)
			continue
		case write == nil:
			tw.recommended, tw.killed = stampOf(now), false
			continue
		}
		batch.add(write)
	}
	for _, d := range batch.wait() {
		if d.err != nil {
			r.log.Warn("recommendation not written", "workload", d.ref.String(), "namespace", d.ref.Namespace, "err", d.err)
			continue // tried again next pass
		}
		d.tw.recommended, d.tw.killed = stampOf(now), false
	}
}

// resolve returns the workload and its policy when that policy enables
// spec.recommend, else nil. It reads the workload's metadata alone
// (workload.MetaWith), its labels and UID: a view of a Deployment each
// workload each pass was a tenth of what the leader allocated at 25,000.
func (r *Loop) resolve(ctx context.Context, pols *policy.Policies, ref workload.Ref) *resolvedWorkload {
	m, err := workload.MetaWith(ctx, r.views, ref.Namespace, v1alpha1.TargetRef{Kind: ref.Kind, Name: ref.Name}, &r.scratch)
	if err != nil {
		return nil
	}
	res, err := pols.ResolveShared(policy.Workload{Kind: ref.Kind, Namespace: ref.Namespace, Name: ref.Name, Labels: m.Labels})
	if err != nil || res == nil || res.Spec.Recommend == nil || !res.Spec.Recommend.Enabled {
		return nil
	}
	return &resolvedWorkload{uid: m.UID, resolved: res}
}

// prune forgets the pods no longer listed and the workloads that are gone.
func (r *Loop) prune(ctx context.Context) {
	for k, in := range r.instances {
		if in.seen != r.tick {
			delete(r.instances, k)
		}
	}
	for ref, tw := range r.workloads {
		if tw.seen == r.tick {
			continue
		}
		tw.pods = nil
		if _, err := workload.Get(ctx, r.client, ref.Namespace, v1alpha1.TargetRef{Kind: ref.Kind, Name: ref.Name}); apierrors.IsNotFound(err) {
			r.forget(ref)
		}
	}
}

// forget drops a workload's history: it is gone, or no policy enables
// the recommender for it any more.
func (r *Loop) forget(ref workload.Ref) {
	if tw := r.workloads[ref]; tw != nil {
		r.tracked -= len(tw.containers)
		delete(r.workloads, ref)
		if len(r.dropped) < r.max {
			r.dropped[ref] = true // else collected at the next interval
		}
	}
}

// maxModels bounds the distinct models, one per distinct policy
// parameters, the defaults' included. A workload whose parameters would
// make one more is fed and recommended with the defaults' model.
const maxModels = 64
