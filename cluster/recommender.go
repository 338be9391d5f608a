package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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

	// base is the model the states are fed with; models are the models
	// recommendations are made with, one per distinct policy parameters
	// (the bucket and decay fields, which shape the state, are the base's).
	base   *recommend.Model
	models map[recommend.Params]*recommend.Model

	workloads map[workload.Ref]*trackedWorkload
	instances map[instanceKey]*trackedInstance
	// refs caches the workload of each pod seen, by UID.
	refs map[types.UID]workload.Ref
	// tracked is the count of container states over every workload, and
	// trackedGauge its metric.
	tracked      int
	trackedGauge prometheus.Gauge
	tick         uint64
}

// trackedWorkload is the history of one workload's containers.
type trackedWorkload struct {
	containers map[string]*recommend.ContainerState
	// recommended is when its recommendation was last made.
	recommended time.Time
	seen        uint64
	pods        []*corev1.Pod
	// throttledTo is the end of the throttling window last read.
	throttledTo time.Time
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
	seen      uint64
}

// newRecommender returns the loop over the usage and kernel stores, with
// its metric on reg.
func newRecommender(c client.Client, sig *signals.Stores, cfg RecommenderConfig, now func() time.Time, reg prometheus.Registerer, log *slog.Logger) (*recommender, error) {
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
		models:    map[recommend.Params]*recommend.Model{base.Params(): base},
		workloads: map[workload.Ref]*trackedWorkload{}, instances: map[instanceKey]*trackedInstance{},
		refs: map[types.UID]workload.Ref{}, trackedGauge: gauge,
	}, nil
}

// NeedLeaderElection makes only the elected leader run the loop: a
// standby's recommendations would race the leader's.
func (r *recommender) NeedLeaderElection() bool { return true }

// Start runs the loop until ctx ends. A failed pass is logged and the next
// one tries again.
func (r *recommender) Start(ctx context.Context) error {
	t := time.NewTicker(r.period)
	defer t.Stop()
	for {
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
			r.ingest(pod, c, st, now)
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
func (r *recommender) ingest(pod *corev1.Pod, c corev1.Container, st *recommend.ContainerState, now time.Time) {
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
			st.AddCPU(r.base, (s.CPU-in.cpu).Seconds()/s.At.Sub(in.cpuAt).Seconds(), s.At)
		}
		in.cpuAt, in.cpu = s.At, s.CPU
		st.AddMemory(r.base, &in.peak, float64(s.WorkingSet), s.At)
		in.cursor, last = s.At, s
	}
	// An OOM kill, from the agent's kernel count or the pod's status, latches
	// memory from the highest of what the container was seen using and its
	// limit, where the kernel killed it.
	peak := float64(max(last.WorkingSet, last.Peak))
	if lim, ok := c.Resources.Limits[corev1.ResourceMemory]; ok {
		peak = max(peak, float64(lim.Value()))
	}
	n, _ := r.kernel.OOMKills(pod.UID, c.Name, time.Time{}, now.Add(time.Hour))
	if n > in.kills {
		st.RecordOOM(r.base, peak, now)
	}
	in.kills = n // fewer once the store pruned old kills
	for _, cs := range pod.Status.ContainerStatuses {
		if t := cs.LastTerminationState.Terminated; cs.Name == c.Name && t != nil && t.Reason == oomKilledReason && t.FinishedAt.After(in.statusOOM) {
			st.RecordOOM(r.base, peak, t.FinishedAt.Time)
			in.statusOOM = t.FinishedAt.Time
		}
	}
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
				st.AddThrottling(r.base, w.Throttled/w.Periods, now)
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
	}
}

// model returns the model for a policy's spec.recommend and throttling
// ratio: the base's state shape with the policy's percentiles and guards.
func (r *recommender) model(spec v1alpha1.PolicySpec) (*recommend.Model, error) {
	rs := spec.Recommend.DeepCopy()
	rs.SetDefaults()
	p := r.base.Params()
	p.MinHistory = rs.MinHistory.Duration
	p.MinChange = float64(*rs.MinChangePercent) / 100
	p.CPUPercentile = float64(*rs.CPUPercentile) / 100
	p.MemoryPercentile = float64(*rs.MemoryPercentile) / 100
	p.SafetyMargin = float64(*rs.SafetyMarginPercent) / 100
	ratio := spec.Guardrails.Rollback.ThrottlingRatio
	if ratio == "" {
		ratio = v1alpha1.DefaultThrottlingRatio
	}
	tr, err := strconv.ParseFloat(ratio, 64)
	if err != nil {
		return nil, fmt.Errorf("parse throttlingRatio %q: %w", ratio, err)
	}
	p.ThrottlingRatio = tr
	if m := r.models[p]; m != nil {
		return m, nil
	}
	m, err := recommend.NewModel(p)
	if err != nil {
		return nil, err
	}
	if len(r.models) > 64 {
		clear(r.models)
	}
	r.models[p] = m
	return m, nil
}

// recommendationBasis is the JSON of RecommendationBasisAnnotation: what a
// recommendation was made from.
type recommendationBasis struct {
	// MadeAt is when the values were computed.
	MadeAt time.Time `json:"madeAt"`
	// Policy is the policy whose spec.recommend the values follow.
	Policy string `json:"policy"`
	// CPUPercentile, MemoryPercentile and SafetyMargin are the estimators'
	// parameters, as fractions.
	CPUPercentile    float64 `json:"cpuPercentile"`
	MemoryPercentile float64 `json:"memoryPercentile"`
	SafetyMargin     float64 `json:"safetyMargin"`
	// Containers are the figures per container.
	Containers []containerBasis `json:"containers"`
}

// containerBasis is one container's figures.
type containerBasis struct {
	Name string `json:"name"`
	// Samples, History and Confidence are the history's.
	Samples    uint32  `json:"samples"`
	History    string  `json:"history"`
	Confidence float64 `json:"confidence"`
	// TargetCPUMilli and TargetMemoryBytes are the estimate before the
	// latches and guards.
	TargetCPUMilli    int64 `json:"targetCPUMilli"`
	TargetMemoryBytes int64 `json:"targetMemoryBytes"`
	// Refusals are the values held back, with why.
	Refusals []refusalBasis `json:"refusals,omitempty"`
}

// refusalBasis is one recommend.Refusal.
type refusalBasis struct {
	Resource  recommend.Resource `json:"resource"`
	Field     recommend.Field    `json:"field"`
	Reason    recommend.Reason   `json:"reason"`
	Asked     int64              `json:"asked"`
	Held      int64              `json:"held"`
	Observed  float64            `json:"observed"`
	Threshold float64            `json:"threshold"`
	At        *metav1.Time       `json:"at,omitempty"`
	Message   string             `json:"message"`
}

// recommendFor makes the workload's recommendation and creates or updates
// its RightsizingRecommendation, when any container's values change.
func (r *recommender) recommendFor(ctx context.Context, ref workload.Ref, rw *resolvedWorkload, tw *trackedWorkload, now time.Time) error {
	m, err := r.model(rw.resolved.Spec)
	if err != nil {
		return fmt.Errorf("recommender parameters of %s %s: %w", rw.resolved.Ref.Kind, rw.resolved.Ref.Name, err)
	}
	var existing v1alpha1.RightsizingRecommendation
	err = r.client.Get(ctx, client.ObjectKey{Namespace: ref.Namespace, Name: ref.Name}, &existing)
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return fmt.Errorf("read recommendation %s/%s: %w", ref.Namespace, ref.Name, err)
	case existing.Labels[v1alpha1.RecommendedByLabel] != v1alpha1.RecommendedByKerf:
		r.log.Debug("recommendation not made by the recommender left alone", "namespace", ref.Namespace, "name", ref.Name)
		return nil
	case !ref.Targets(ref.Namespace, existing.Spec.TargetRef):
		r.log.Debug("recommendation for another workload left alone", "namespace", ref.Namespace, "name", ref.Name)
		return nil
	}
	holds := holdsOf(&existing.Status, now)
	p := m.Params()
	basis := recommendationBasis{MadeAt: now.UTC().Truncate(time.Second), Policy: string(rw.resolved.Ref.Kind) + "/" + rw.resolved.Ref.Name,
		CPUPercentile: p.CPUPercentile, MemoryPercentile: p.MemoryPercentile, SafetyMargin: p.SafetyMargin}
	var containers []v1alpha1.ContainerResources
	changed := false
	tmpl := rw.w.Template.Spec.Containers
	for _, c := range tmpl {
		st := tw.containers[c.Name]
		if st == nil {
			continue
		}
		res := m.Recommend(st, recommend.Input{
			Now: now, Request: resourcesOf(c.Resources.Requests), Limit: resourcesOf(c.Resources.Limits),
			Containers: len(tmpl), Holds: holds,
		})
		if !res.Ready {
			continue
		}
		changed = changed || res.Changed
		containers = append(containers, v1alpha1.ContainerResources{Name: c.Name, Requests: valuesOf(res.Request), Limits: valuesOf(res.Limit)})
		cb := containerBasis{Name: c.Name, Samples: res.Estimate.Samples, History: res.Estimate.History.Round(time.Second).String(),
			Confidence: res.Estimate.Confidence, TargetCPUMilli: res.Estimate.Target.CPUMilli, TargetMemoryBytes: res.Estimate.Target.MemoryBytes}
		for _, f := range res.Refusals {
			rb := refusalBasis{Resource: f.Resource, Field: f.Field, Reason: f.Reason, Asked: f.Asked, Held: f.Held,
				Observed: f.Observed, Threshold: f.Threshold, Message: f.String()}
			if !f.At.IsZero() {
				rb.At = &metav1.Time{Time: f.At}
			}
			cb.Refusals = append(cb.Refusals, rb)
		}
		basis.Containers = append(basis.Containers, cb)
	}
	// Nothing new is made to ask for the current values; an existing one
	// is brought to them (a latch that now holds a value at the manifest's
	// must not leave a lower one asked for).
	if len(containers) == 0 || (!changed && existing.Name == "") {
		return nil
	}
	strategy := rw.resolved.Spec.Recommend.Strategy
	if strategy == "" {
		strategy = v1alpha1.DefaultRecommendStrategy
	}
	spec := v1alpha1.RightsizingRecommendationSpec{
		TargetRef:  v1alpha1.TargetRef{APIVersion: "apps/v1", Kind: ref.Kind, Name: ref.Name},
		Strategy:   strategy,
		Containers: containers,
	}
	if existing.Name != "" && sameSpec(existing.Spec, spec) && sameRefusals(existing.Annotations[v1alpha1.RecommendationBasisAnnotation], basis) {
		return nil
	}
	raw, err := json.Marshal(basis)
	if err != nil {
		return fmt.Errorf("encode the recommendation's basis: %w", err)
	}
	if existing.Name == "" {
		rsr := &v1alpha1.RightsizingRecommendation{
			ObjectMeta: metav1.ObjectMeta{Namespace: ref.Namespace, Name: ref.Name,
				Labels:      map[string]string{v1alpha1.RecommendedByLabel: v1alpha1.RecommendedByKerf},
				Annotations: map[string]string{v1alpha1.RecommendationBasisAnnotation: string(raw)}},
			Spec: spec,
		}
		if err := r.client.Create(ctx, rsr); err != nil {
			return fmt.Errorf("create recommendation %s/%s: %w", ref.Namespace, ref.Name, err)
		}
		r.log.Info("recommendation made", "namespace", ref.Namespace, "name", ref.Name, "refusals", refusalCount(basis))
		return nil
	}
	// A patch that fails when the object changed since it was read, so a
	// recommendation someone took over in between is never overwritten.
	from := client.MergeFromWithOptions(existing.DeepCopy(), client.MergeFromWithOptimisticLock{})
	existing.Spec.Strategy, existing.Spec.Containers = spec.Strategy, spec.Containers
	if existing.Annotations == nil {
		existing.Annotations = map[string]string{}
	}
	existing.Annotations[v1alpha1.RecommendationBasisAnnotation] = string(raw)
	if err := r.client.Patch(ctx, &existing, from); err != nil {
		return fmt.Errorf("update recommendation %s/%s: %w", ref.Namespace, ref.Name, err)
	}
	r.log.Info("recommendation updated", "namespace", ref.Namespace, "name", ref.Name, "refusals", refusalCount(basis))
	return nil
}

// holdsOf reads the cooldowns and failedPermanent of a recommendation's
// status as the latches' holds.
func holdsOf(st *v1alpha1.RightsizingRecommendationStatus, now time.Time) recommend.Holds {
	var h recommend.Holds
	for _, c := range st.Cooldowns {
		if c.Until.After(now) {
			switch c.Resource {
			case v1alpha1.ResourceCPU:
				h.CPUCooldown = true
			case v1alpha1.ResourceMemory:
				h.MemoryCooldown = true
			}
		}
	}
	if st.Rollback != nil && st.Rollback.State == v1alpha1.BackoffFailedPermanent {
		resources := []v1alpha1.ResourceName{v1alpha1.ResourceCPU, v1alpha1.ResourceMemory}
		if st.Change != nil && len(st.Change.Resources) > 0 {
			resources = st.Change.Resources
		}
		h.CPUFailedPermanent = slices.Contains(resources, v1alpha1.ResourceCPU)
		h.MemoryFailedPermanent = slices.Contains(resources, v1alpha1.ResourceMemory)
	}
	return h
}

// resourcesOf reads a resource list as millicores and bytes.
func resourcesOf(l corev1.ResourceList) recommend.Resources {
	var r recommend.Resources
	if q, ok := l[corev1.ResourceCPU]; ok {
		r.CPUMilli = q.MilliValue()
	}
	if q, ok := l[corev1.ResourceMemory]; ok {
		r.MemoryBytes = q.Value()
	}
	return r
}

// valuesOf writes millicores and bytes as quantities, memory rounded up to
// a whole mebibyte; nil when both are unset.
func valuesOf(r recommend.Resources) *v1alpha1.ResourceValues {
	var v v1alpha1.ResourceValues
	if r.CPUMilli > 0 {
		v.CPU = resource.NewMilliQuantity(r.CPUMilli, resource.DecimalSI)
	}
	if r.MemoryBytes > 0 {
		mi := (r.MemoryBytes + recommend.Mi - 1) / recommend.Mi
		v.Memory = resource.NewQuantity(mi*recommend.Mi, resource.BinarySI)
	}
	if v.CPU == nil && v.Memory == nil {
		return nil
	}
	return &v
}

// sameSpec reports whether two specs ask for the same values.
func sameSpec(a, b v1alpha1.RightsizingRecommendationSpec) bool {
	return a.Strategy == b.Strategy && policy.ValueFingerprint(a.Containers) == policy.ValueFingerprint(b.Containers)
}

// sameRefusals reports whether the recorded basis held back the same
// values for the same reasons as basis.
func sameRefusals(recorded string, basis recommendationBasis) bool {
	var old recommendationBasis
	if json.Unmarshal([]byte(recorded), &old) != nil {
		return false
	}
	key := func(b recommendationBasis) []string {
		var out []string
		for _, c := range b.Containers {
			for _, f := range c.Refusals {
				out = append(out, fmt.Sprintf("%s/%s/%s/%s/%d", c.Name, f.Resource, f.Field, f.Reason, f.Held))
			}
		}
		return out
	}
	return slices.Equal(key(old), key(basis))
}

// refusalCount counts the refusals of a basis, for the log.
func refusalCount(b recommendationBasis) int {
	n := 0
	for _, c := range b.Containers {
		n += len(c.Refusals)
	}
	return n
}
