package cluster

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/cluster/policy"
	"github.com/kerf-dev/kerf/cluster/recommend"
	"github.com/kerf-dev/kerf/cluster/signals"
	"github.com/kerf-dev/kerf/cluster/workload"
)

// RecommenderConfig configures the leader's recommender loop
// (docs/recommender.md). Whether a workload is recommended for, and how, is
// its policy's spec.recommend; this only tunes the loop.
type RecommenderConfig struct {
	// Period is how often the loop reads the agents' usage readings from
	// signals.Usage; zero means DefaultRecommenderPeriod. It must stay
	// within the store's span (signals.UsageSamples readings) for no
	// reading to be missed.
	Period time.Duration
	// MaxContainers bounds the workload containers whose history is kept;
	// zero means DefaultRecommenderMaxContainers. Beyond it new ones are
	// not tracked (and a warning says so).
	MaxContainers int
	// CheckpointInterval is how long a workload's RightsizingCheckpoint
	// waits before it is written again (when its history changed); zero
	// means DefaultCheckpointInterval.
	CheckpointInterval time.Duration
	// CheckpointWrites bounds the checkpoint writes and deletes of one
	// pass; zero means DefaultCheckpointWrites.
	CheckpointWrites int
}

// Defaults of RecommenderConfig.
const (
	// DefaultRecommenderPeriod reads every reading of the agents' default
	// 10 s usage interval well within the store's four.
	DefaultRecommenderPeriod = 10 * time.Second
	// DefaultRecommenderMaxContainers bounds the history to about 100 MB
	// at the core's worst case of two full histograms per container.
	DefaultRecommenderMaxContainers = 100_000
)

// recommender is the leader's recommender loop, a manager Runnable only the
// elected leader runs: every Period it feeds the usage readings of the pods
// of the workloads whose policy enables spec.recommend into per workload
// and container states (cluster/recommend), and every policy interval it
// makes their recommendations and writes them.
type recommender struct {
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
	// uses (at most once a pass), and modelMetrics the counts of
	// histories restarted under a new model and of workloads that fell
	// back to the defaults' model.
	modelsPruned uint64
	modelMetrics *modelMetrics

	workloads map[workload.Ref]*trackedWorkload
	instances map[instanceKey]*trackedInstance
	// refs caches the workload of each pod seen, by UID.
	refs map[types.UID]workload.Ref
	// tracked is the count of container states over every workload, and
	// trackedGauge its metric.
	tracked      int
	trackedGauge prometheus.Gauge
	tick         uint64

	// The checkpoints (checkpoint.go): reader reads them from the
	// apiserver in namespaces (all when empty), the ones the leader
	// watches; their interval and writes per pass, whether they were
	// loaded, the workloads forgotten whose checkpoint is to be deleted,
	// when they were last collected.
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
}

// trackedWorkload is the history of one workload's containers.
type trackedWorkload struct {
	containers map[string]*recommend.ContainerState
	// model is the model its states are fed and recommended with: its
	// policy's (model), or the defaults' when none could be had
	// (fellBack: the bound of distinct models was reached).
	model    *recommend.Model
	fellBack bool
	// recommended is when its recommendation was last made.
	recommended time.Time
	seen        uint64
	pods        []*corev1.Pod
	// throttledTo is the end of the throttling window last read.
	throttledTo time.Time
	// ckpt is where its checkpoint is.
	ckpt checkpointMark
}

// instanceKey names one container of one pod.
type instanceKey struct {
	pod       types.UID
	container string
}

// trackedInstance is what the loop keeps per running container: where it
// is in the usage readings, its previous CPU counter (a rate needs two),
// its memory peak window, and where it is in its OOM kills.
type trackedInstance struct {
	cursor time.Time
	cpuAt  time.Time
	cpu    time.Duration
	peak   recommend.PeakWindow
	// kills is the count of the kernel store's OOM kills of the container
	// already recorded, and statusOOM the finish time of the pod status's
	// last OOM termination recorded: counts and times the reports carry,
	// so a kill that reaches the store or the cache after the pass that
	// would have covered its time is still recorded, once.
	kills     int
	statusOOM time.Time
	// limit is the container's memory limit in bytes as the previous pass
	// saw it (0: none), and passAt that pass's time: a kill found now
	// happened under the lowest limit since (killLimit).
	limit  int64
	passAt time.Time
	seen   uint64
}

// newRecommender returns the loop over the usage and kernel stores, with
// its metrics on reg; reader reads its checkpoints in namespaces (all
// when empty).
func newRecommender(c client.Client, reader client.Reader, namespaces []string, sig *signals.Stores, cfg RecommenderConfig, now func() time.Time, reg prometheus.Registerer, log *slog.Logger) (*recommender, error) {
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
	if cfg.Period <= 0 {
		cfg.Period = DefaultRecommenderPeriod
	}
	if cfg.MaxContainers <= 0 {
		cfg.MaxContainers = DefaultRecommenderMaxContainers
	}
	if now == nil {
		now = time.Now
	}
	return &recommender{
		client: c, usage: sig.Usage, kernel: sig.Kernel, now: now, log: log.With("component", "recommender"),
		period: cfg.Period, max: cfg.MaxContainers, base: base,
		models: map[recommend.Params]*recommend.Model{base.Params(): base}, modelMetrics: mm,
		workloads: map[workload.Ref]*trackedWorkload{}, instances: map[instanceKey]*trackedInstance{},
		refs: map[types.UID]workload.Ref{}, trackedGauge: gauge,
		reader: reader, namespaces: namespaces, ckptInterval: cfg.CheckpointInterval, ckptWrites: cfg.CheckpointWrites,
		ckptMetrics: ckm, dropped: map[workload.Ref]bool{}, vpa: vpa,
	}, nil
}

// NeedLeaderElection makes only the elected leader run the loop: a
// standby's recommendations would race the leader's.
func (r *recommender) NeedLeaderElection() bool { return true }

// Start runs the loop until ctx ends: it resumes from the checkpoints
// before its first pass, and writes them at the end. A failed pass (or
// load) is logged and the next one tries again.
func (r *recommender) Start(ctx context.Context) error {
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

// policies is one pass's view of the policies and namespaces.
type policies struct {
	namespaces map[string]map[string]string
	namespaced map[string][]v1alpha1.RightsizingPolicy
	cluster    []v1alpha1.ClusterRightsizingPolicy
}

// anyEnabled reports whether any policy enables spec.recommend.
func (p *policies) anyEnabled() bool {
	for _, c := range p.cluster {
		if c.Spec.Recommend != nil && c.Spec.Recommend.Enabled {
			return true
		}
	}
	for _, ps := range p.namespaced {
		for _, np := range ps {
			if np.Spec.Recommend != nil && np.Spec.Recommend.Enabled {
				return true
			}
		}
	}
	return false
}

// resolvedWorkload is one pass's view of a workload: the object and the
// policy that governs it when that policy enables spec.recommend.
type resolvedWorkload struct {
	w        *workload.Workload
	resolved *policy.Resolved
	// modelErr is why the policy's parameters gave no model (the
	// workload's states keep theirs, and nothing is recommended).
	modelErr error
}

// pass reads the new usage readings, feeds the states, and makes the
// recommendations that are due.
func (r *recommender) pass(ctx context.Context) error {
	now := r.now()
	r.tick++
	pols, err := r.listPolicies(ctx)
	if err != nil {
		return err
	}
	if !pols.anyEnabled() {
		// Nothing is recommended for: keep no history and read no pods.
		clear(r.workloads)
		clear(r.instances)
		clear(r.refs)
		r.tracked = 0
		r.checkpoint(ctx, pols, nil, now)
		return nil
	}
	var pods corev1.PodList
	// The pods are only read, never changed: the cache's own copies do.
	if err := r.client.List(ctx, &pods, client.UnsafeDisableDeepCopy); err != nil {
		return fmt.Errorf("list pods: %w", err)
	}
	resolved := map[workload.Ref]*resolvedWorkload{}
	full := false
	for i := range pods.Items {
		pod := &pods.Items[i]
		if pod.DeletionTimestamp != nil || pod.Status.Phase != corev1.PodRunning {
			continue
		}
		ref, ok := r.refs[pod.UID]
		if !ok {
			var found bool
			ref, found, err = workload.Of(ctx, r.client, pod)
			if err != nil || !found {
				continue // a ReplicaSet the cache has not seen yet is found on a later pass
			}
			r.refs[pod.UID] = ref
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
			tw = &trackedWorkload{containers: map[string]*recommend.ContainerState{}}
			r.workloads[ref] = tw
		}
		if tw.seen != r.tick {
			tw.seen, tw.pods = r.tick, tw.pods[:0]
			r.adopt(ref, tw, rw, now)
		}
		tw.pods = append(tw.pods, pod)
		for _, c := range pod.Spec.Containers {
			st := tw.containers[c.Name]
			if st == nil {
				if r.tracked >= r.max {
					full = true
					continue
				}
				st = &recommend.ContainerState{}
				tw.containers[c.Name] = st
				r.tracked++
			}
			r.ingest(ctx, ref, pod, c, tw.model, st, now)
		}
	}
	if full {
		r.log.Warn("recommender tracks its maximum of containers; new ones are not recommended for", "maxContainers", r.max)
	}
	r.throttling(now)
	r.prune(ctx)
	for ref, tw := range r.workloads {
		rw := resolved[ref]
		if rw == nil || tw.seen != r.tick {
			continue
		}
		spec := rw.resolved.Spec.Recommend.DeepCopy()
		spec.SetDefaults()
		if !tw.recommended.IsZero() && now.Sub(tw.recommended) < spec.Interval.Duration {
			continue
		}
		if err := r.recommendFor(ctx, ref, rw, tw, now); err != nil {
			r.log.Warn("recommendation not written", "workload", ref.String(), "namespace", ref.Namespace, "err", err)
			continue
		}
		tw.recommended = now
	}
	// The count is known before the checkpoint writes (which take time).
	r.trackedGauge.Set(float64(r.tracked))
	r.checkpoint(ctx, pols, resolved, now)
	return nil
}

// listPolicies reads the policies and namespace labels once per pass.
func (r *recommender) listPolicies(ctx context.Context) (*policies, error) {
	var nss corev1.NamespaceList
	if err := r.client.List(ctx, &nss); err != nil {
		return nil, fmt.Errorf("list namespaces: %w", err)
	}
	var namespaced v1alpha1.RightsizingPolicyList
	if err := r.client.List(ctx, &namespaced); err != nil {
		return nil, fmt.Errorf("list RightsizingPolicies: %w", err)
	}
	var cluster v1alpha1.ClusterRightsizingPolicyList
	if err := r.client.List(ctx, &cluster); err != nil {
		return nil, fmt.Errorf("list ClusterRightsizingPolicies: %w", err)
	}
	p := &policies{namespaces: map[string]map[string]string{}, namespaced: map[string][]v1alpha1.RightsizingPolicy{}, cluster: cluster.Items}
	for _, ns := range nss.Items {
		p.namespaces[ns.Name] = ns.Labels
	}
	for _, np := range namespaced.Items {
		p.namespaced[np.Namespace] = append(p.namespaced[np.Namespace], np)
	}
	return p, nil
}

// resolve returns the workload and its policy when that policy enables
// spec.recommend, else nil.
func (r *recommender) resolve(ctx context.Context, pols *policies, ref workload.Ref) *resolvedWorkload {
	w, err := workload.Get(ctx, r.client, ref.Namespace, v1alpha1.TargetRef{Kind: ref.Kind, Name: ref.Name})
	if err != nil {
		return nil
	}
	res, err := policy.Resolve(policy.Workload{Kind: ref.Kind, Namespace: ref.Namespace, Name: ref.Name, Labels: w.Object.GetLabels()},
		pols.namespaces[ref.Namespace], pols.namespaced[ref.Namespace], pols.cluster)
	if err != nil || res == nil || res.Spec.Recommend == nil || !res.Spec.Recommend.Enabled {
		return nil
	}
	return &resolvedWorkload{w: w, resolved: res}
}

// ingest feeds a running container's new usage readings and OOM kills into
// its workload's state.
func (r *recommender) ingest(ctx context.Context, ref workload.Ref, pod *corev1.Pod, c corev1.Container, m *recommend.Model, st *recommend.ContainerState, now time.Time) {
	k := instanceKey{pod.UID, c.Name}
	in := r.instances[k]
	if in == nil {
		in = &trackedInstance{}
		r.instances[k] = in
	}
	in.seen = r.tick
	var last signals.UsageSample
	for _, s := range r.usage.Since(pod.UID, c.Name, in.cursor, nil) {
		if !in.cpuAt.IsZero() && s.CPU >= in.cpu && s.At.After(in.cpuAt) {
			st.AddCPU(m, (s.CPU-in.cpu).Seconds()/s.At.Sub(in.cpuAt).Seconds(), s.At)
		}
		in.cpuAt, in.cpu = s.At, s.CPU
		st.AddMemory(m, &in.peak, float64(s.WorkingSet), s.At)
		in.cursor, last = s.At, s
	}
	// An OOM kill, from the agent's kernel count or the pod's status, latches
	// memory from the highest of what the container was seen using and its
	// limit, where the kernel killed it.
	limit := memoryLimit(pod, c)
	since := in.passAt
	defer func() { in.limit, in.passAt = limit, now }()
	killPeak := func() float64 {
		peak := float64(max(last.WorkingSet, last.Peak))
		if l := r.killLimit(ctx, ref, c.Name, since, limit, in.limit); l > 0 {
			peak = max(peak, float64(l))
		}
		return peak
	}
	n, _ := r.kernel.OOMKills(pod.UID, c.Name, time.Time{}, now.Add(time.Hour))
	if n > in.kills {
		st.RecordOOM(m, killPeak(), now)
	}
	in.kills = n // fewer once the store pruned old kills
	for _, cs := range pod.Status.ContainerStatuses {
		if t := cs.LastTerminationState.Terminated; cs.Name == c.Name && t != nil && t.Reason == oomKilledReason && t.FinishedAt.After(in.statusOOM) {
			st.RecordOOM(m, killPeak(), t.FinishedAt.Time)
			in.statusOOM = t.FinishedAt.Time
		}
	}
}

// killLimit is the memory limit in bytes a kill found now happened under
// (0: none known): the lowest the container ran with since its previous
// pass. That is the lowest of its limit now, at the previous pass, and the
// limits Kerf's own actions on the workload's recommendation put in force
// or took away since then: a change applied and rolled back between two
// passes (the usual course of an OOM kill: the rollback takes a few
// seconds, the passes are 10 s apart) is seen by no pass, and the limit
// now is the one the rollback restored.
func (r *recommender) killLimit(ctx context.Context, ref workload.Ref, container string, since time.Time, now, previous int64) int64 {
	low := func(a, b int64) int64 {
		if a == 0 || (b > 0 && b < a) {
			return b
		}
		return a
	}
	limit := low(now, previous)
	var rsr v1alpha1.RightsizingRecommendation
	if err := r.client.Get(ctx, client.ObjectKey{Namespace: ref.Namespace, Name: ref.Name}, &rsr); err != nil ||
		rsr.Spec.TargetRef.Kind != ref.Kind || rsr.Spec.TargetRef.Name != ref.Name {
		return limit
	}
	memory := func(v *v1alpha1.ResourceValues) int64 {
		if v == nil || v.Memory == nil {
			return 0
		}
		return v.Memory.Value()
	}
	for _, a := range rsr.Status.History {
		// Whole seconds: an action of the previous pass's second counts.
		if !since.IsZero() && a.Time.Time.Before(since.Truncate(time.Second)) {
			continue
		}
		for _, cv := range a.Containers {
			if cv.Name != container {
				continue
			}
			switch a.Type {
			case v1alpha1.ActionApplied:
				limit = low(limit, memory(cv.New.Limits))
			case v1alpha1.ActionRolledBack:
				limit = low(limit, memory(cv.Old.Limits))
			}
		}
	}
	return limit
}

// memoryLimit is the memory limit in bytes the container runs under: the
// lower of its pod spec's and the one the kubelet reports in the pod's
// status (they differ while a resize is in flight); 0 when it has none.
func memoryLimit(pod *corev1.Pod, c corev1.Container) int64 {
	var limit int64
	if q, ok := c.Resources.Limits[corev1.ResourceMemory]; ok {
		limit = q.Value()
	}
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.Name != c.Name || cs.Resources == nil {
			continue
		}
		if q, ok := cs.Resources.Limits[corev1.ResourceMemory]; ok && (limit == 0 || q.Value() < limit) {
			limit = q.Value()
		}
	}
	return limit
}

// oomKilledReason is the reason the kubelet gives a container's
// termination by the OOM killer.
const oomKilledReason = "OOMKilled"

// throttling feeds each tracked workload's CFS throttling ratio since its
// previous read (for a workload tracked anew, over the span the kernel
// store keeps every sample of), summed over its pods per container name.
func (r *recommender) throttling(now time.Time) {
	for _, tw := range r.workloads {
		if tw.seen != r.tick || len(tw.pods) == 0 {
			continue
		}
		from := tw.throttledTo
		if from.IsZero() {
			from = now.Add(-signals.DefaultRecent)
		}
		tw.throttledTo = now
		names := make([]string, 0, len(tw.containers))
		for name := range tw.containers {
			names = append(names, name)
		}
		wins, err := r.kernel.ThrottleWindows(tw.pods, names, from, now)
		if err != nil {
			continue
		}
		for name, w := range wins {
			if st := tw.containers[name]; st != nil && w.Periods > 0 {
				st.AddThrottling(tw.model, w.Throttled/w.Periods, now)
			}
		}
	}
}

// prune forgets the pods no longer listed and the workloads that are gone.
func (r *recommender) prune(ctx context.Context) {
	for k, in := range r.instances {
		if in.seen != r.tick {
			delete(r.instances, k)
		}
	}
	live := map[types.UID]bool{}
	for k := range r.instances {
		live[k.pod] = true
	}
	for uid := range r.refs {
		if !live[uid] {
			delete(r.refs, uid)
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
func (r *recommender) forget(ref workload.Ref) {
	if tw := r.workloads[ref]; tw != nil {
		r.tracked -= len(tw.containers)
		delete(r.workloads, ref)
		if len(r.dropped) < r.max {
			r.dropped[ref] = true // else collected at the next interval
		}
	}
}

// maxModels bounds the distinct models (one per distinct policy
// parameters, the defaults' included); a workload whose parameters would
// make one more is fed and recommended with the defaults' model.
const maxModels = 64

// params returns the recommender parameters of a policy's spec.recommend
// and throttling ratio: the defaults' bucket layout with every other
// parameter the policy's.
func (r *recommender) params(spec v1alpha1.PolicySpec) (recommend.Params, error) {
	rs := spec.Recommend.DeepCopy()
	rs.SetDefaults()
	p := r.base.Params()
	percent := func(v *int32) float64 { return float64(*v) / 100 }
	p.MinHistory = rs.MinHistory.Duration
	p.MinChange = percent(rs.MinChangePercent)
	p.CPUPercentile = percent(rs.CPUPercentile)
	p.MemoryPercentile = percent(rs.MemoryPercentile)
	p.LowerPercentile = percent(rs.LowerPercentile)
	p.UpperPercentile = percent(rs.UpperPercentile)
	p.SafetyMargin = percent(rs.SafetyMarginPercent)
	p.ConfidenceInterval = rs.ConfidenceInterval.Duration
	p.MinCPUMilli = rs.PodMinimum.CPU.MilliValue()
	p.MinMemoryBytes = rs.PodMinimum.Memory.Value()
	p.OOMBumpBytes = rs.OOMBump.Memory.Value()
	p.OOMBumpRatio = 1 + percent(rs.OOMBump.Percent)
	p.CPUHalfLife = rs.CPUHalfLife.Duration
	p.MemoryHalfLife = rs.MemoryHalfLife.Duration
	p.MemoryInterval = rs.MemoryAggregationInterval.Duration
	p.MemoryIntervals = int(*rs.MemoryAggregationIntervals)
	p.UpscaleOnlyCPU = slices.Contains(rs.UpscaleOnly, v1alpha1.ResourceCPU)
	p.UpscaleOnlyMemory = slices.Contains(rs.UpscaleOnly, v1alpha1.ResourceMemory)
	p.KeepLimitProportion = *rs.KeepLimitProportion
	ratio := spec.Guardrails.Rollback.ThrottlingRatio
	if ratio == "" {
		ratio = v1alpha1.DefaultThrottlingRatio
	}
	tr, err := strconv.ParseFloat(ratio, 64)
	if err != nil {
		return p, fmt.Errorf("parse throttlingRatio %q: %w", ratio, err)
	}
	p.ThrottlingRatio = tr
	return p, nil
}

// model returns the model for a policy's parameters (params), made once
// and shared by the workloads that have them. When maxModels distinct
// models are in use (after dropping, at most once a pass, the ones no
// workload uses) it returns the defaults' model and fellBack.
func (r *recommender) model(spec v1alpha1.PolicySpec) (m *recommend.Model, fellBack bool, err error) {
	p, err := r.params(spec)
	if err != nil {
		return nil, false, err
	}
	if m := r.models[p]; m != nil {
		return m, false, nil
	}
	if len(r.models) >= maxModels && r.modelsPruned != r.tick {
		r.modelsPruned = r.tick
		used := map[*recommend.Model]bool{r.base: true}
		for _, tw := range r.workloads {
			used[tw.model] = true
		}
		maps.DeleteFunc(r.models, func(_ recommend.Params, m *recommend.Model) bool { return !used[m] })
	}
	if len(r.models) >= maxModels {
		return r.base, true, nil
	}
	m, err = recommend.NewModel(p)
	if err != nil {
		return nil, false, err
	}
	r.models[p] = m
	return m, false, nil
}

// adopt gives a workload the model of its policy, once a pass. A change
// of the parameters that shape the state (half-lives, memory interval and
// count: the model's fingerprint) restarts its history under the new
// model, keeping its latches (the OOM kill and the throttling in the
// window): old samples cannot be re-weighted into the new shape, and a
// restarted history must not lower what a latch holds. Any other change
// applies at once.
func (r *recommender) adopt(ref workload.Ref, tw *trackedWorkload, rw *resolvedWorkload, now time.Time) {
	m, fellBack, err := r.model(rw.resolved.Spec)
	if err != nil {
		rw.modelErr = fmt.Errorf("recommender parameters of %s %s: %w", rw.resolved.Ref.Kind, rw.resolved.Ref.Name, err)
		if tw.model == nil {
			tw.model = r.base
		}
		return
	}
	if fellBack && !tw.fellBack {
		r.log.Warn("recommender has its maximum of distinct parameter sets; the workload is recommended for with the defaults",
			"namespace", ref.Namespace, "workload", ref.String(), "policy", string(rw.resolved.Ref.Kind)+"/"+rw.resolved.Ref.Name, "maxModels", maxModels)
		r.modelMetrics.fellBack.Inc()
	}
	tw.fellBack = fellBack
	old := tw.model
	tw.model = m
	if old == nil || old == m || old.Fingerprint() == m.Fingerprint() || len(tw.containers) == 0 {
		return
	}
	for name, st := range tw.containers {
		sig := st.Signals(old, now)
		fresh := &recommend.ContainerState{}
		if !sig.OOMAt.IsZero() {
			fresh.RecordOOM(m, sig.OOMPeakBytes, sig.OOMAt)
		}
		if sig.ThrottlingRatio > 0 {
			fresh.AddThrottling(m, sig.ThrottlingRatio, now)
		}
		tw.containers[name] = fresh
	}
	// The instances' peak windows are the old interval's.
	for k, in := range r.instances {
		if r.refs[k.pod] == ref {
			in.peak = recommend.PeakWindow{}
		}
	}
	r.log.Info("recommender history restarts: the policy changed a parameter that shapes it", "namespace", ref.Namespace, "workload", ref.String(),
		"policy", string(rw.resolved.Ref.Kind)+"/"+rw.resolved.Ref.Name, "containers", len(tw.containers),
		"fingerprint", fingerprintHex(m), "previousFingerprint", fingerprintHex(old))
	r.modelMetrics.restarted.Inc()
}

// modelMetrics are the recommender's counters of its models.
type modelMetrics struct {
	restarted, fellBack prometheus.Counter
}

// newModelMetrics registers the model counters on reg.
func newModelMetrics(reg prometheus.Registerer) (*modelMetrics, error) {
	m := &modelMetrics{
		restarted: prometheus.NewCounter(prometheus.CounterOpts{Name: "kerf_recommender_history_restarts_total",
			Help: "Workload histories the recommender restarted because their policy changed a parameter that shapes them (half-lives, memory aggregation interval or count)."}),
		fellBack: prometheus.NewCounter(prometheus.CounterOpts{Name: "kerf_recommender_model_fallbacks_total",
			Help: "Workloads the recommender fed and recommended for with the default parameters because it had its maximum of distinct parameter sets."}),
	}
	for _, c := range []prometheus.Collector{m.restarted, m.fellBack} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register the recommender's model metrics: %w", err)
		}
	}
	return m, nil
}

// runningResources returns what container c of the workload really runs
// with, for the latches and guards: per field (CPU and memory, request and
// limit) the highest over the workload's running pods of the pod spec's
// value (an InPlace resize changes it, not the template) and of the value
// the kubelet reports in status.containerStatuses[].resources (which lags
// the spec while a resize is in flight), so that a latch's "never lower"
// holds against every pod. The template's values (c's) when no running pod
// has the container.
func runningResources(c corev1.Container, pods []*corev1.Pod) (request, limit recommend.Resources) {
	found := false
	for _, p := range pods {
		for i := range p.Spec.Containers {
			if pc := &p.Spec.Containers[i]; pc.Name == c.Name {
				found = true
				request = highest(request, resourcesOf(pc.Resources.Requests))
				limit = highest(limit, resourcesOf(pc.Resources.Limits))
			}
		}
		for i := range p.Status.ContainerStatuses {
			if cs := &p.Status.ContainerStatuses[i]; cs.Name == c.Name && cs.Resources != nil {
				request = highest(request, resourcesOf(cs.Resources.Requests))
				limit = highest(limit, resourcesOf(cs.Resources.Limits))
			}
		}
	}
	if !found {
		return resourcesOf(c.Resources.Requests), resourcesOf(c.Resources.Limits)
	}
	return request, limit
}

// highest is the field-wise maximum of a and b.
func highest(a, b recommend.Resources) recommend.Resources {
	return recommend.Resources{CPUMilli: max(a.CPUMilli, b.CPUMilli), MemoryBytes: max(a.MemoryBytes, b.MemoryBytes)}
}
