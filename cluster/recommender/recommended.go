package recommender

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/cluster/policy"
	"github.com/kerf-dev/kerf/cluster/recommend"
	"github.com/kerf-dev/kerf/cluster/resources"
	"github.com/kerf-dev/kerf/cluster/workload"
)

// errNoneReady says no container of the workload has the history to be
// recommended for yet. Nothing was decided, so its interval does not start.
var errNoneReady = errors.New("no container has enough history yet")

// recommendFor makes the workload's recommendation and returns the
// create or update of its RightsizingRecommendation, when any
// container's values change (nil: nothing to write). The pass's workers
// send it (writes.go).
func (r *Loop) recommendFor(ctx context.Context, ref workload.Ref, rw *resolvedWorkload, tw *trackedWorkload, now time.Time) (*recommendationWrite, error) {
	if rw.modelErr != nil {
		return nil, rw.modelErr
	}
	// The workload's own model: the one its states were fed with.
	m := tw.model
	// The recommendation as it is, a view of the leader's cache in the
	// pass's room, only read: most passes write nothing, and a copy of
	// every recommendation due was 5 % of what the leader allocated at
	// 25,000 workloads. A patch makes its own copy.
	existing := &r.existing
	defer func() { *existing = v1alpha1.RightsizingRecommendation{} }() // pins nothing after
	err := r.views.Get(ctx, client.ObjectKey{Namespace: ref.Namespace, Name: ref.Name}, existing)
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return nil, fmt.Errorf("read recommendation %s/%s: %w", ref.Namespace, ref.Name, err)
	case existing.Labels[v1alpha1.RecommendedByLabel] != v1alpha1.RecommendedByKerf:
		r.log.Debug("recommendation not made by the recommender left alone", "namespace", ref.Namespace, "name", ref.Name)
		return nil, nil
	case !ref.Targets(ref.Namespace, existing.Spec.TargetRef):
		r.log.Debug("recommendation for another workload left alone", "namespace", ref.Namespace, "name", ref.Name)
		return nil, nil
	}
	holds := HoldsOf(&existing.Status, now)
	p := m.Params()
	basis := v1alpha1.RecommendationBasis{MadeAt: now.UTC().Truncate(time.Second), Policy: string(rw.resolved.Ref.Kind) + "/" + rw.resolved.Ref.Name,
		CPUPercentile: p.CPUPercentile, MemoryPercentile: p.MemoryPercentile, SafetyMargin: p.SafetyMargin}
	vpa, ok, err := r.fromVPA(ctx, ref, rw, &basis, now)
	if !ok {
		return nil, err
	}
	var containers []v1alpha1.ContainerResources
	changed := false
	// The workload's object, in the pass's room: a view, only read here.
	w, err := workload.GetWith(ctx, r.views, ref.Namespace, v1alpha1.TargetRef{Kind: ref.Kind, Name: ref.Name}, &r.scratch)
	if err != nil {
		return nil, err
	}
	tmpl := w.Template.Spec.Containers
	// A Guaranteed pod's limits follow its requests: an in-place resize
	// may not change the QoS class. Kerf's changes keep it, so the
	// template's class is the running pods'.
	qos, _ := resources.QOSClass(&w.Template.Spec)
	// Pods that set pod-level resources get the entry (pod) too, made
	// from the pod cgroup's history as a container's. Not from a VPA,
	// which sizes containers only.
	entries := tmpl
	if vpa == nil {
		entries = entriesOf(&w.Template.Spec)
	}
	for _, c := range entries {
		st := tw.containers.get(c.Name)
		if st == nil {
			continue
		}
		// The floor per pod is split over the containers; the pod-level
		// entry is the whole pod.
		share := len(tmpl)
		if c.Name == v1alpha1.PodLevel {
			share = 1
		}
		// Current is what the running pods run with, not the template.
		request, limit := runningResources(c, tw.running)
		// The manifest's values are the template's: an InPlace change
		// leaves the template alone (with Rollout it is the last change).
		in := recommend.Input{
			Now: now, Request: request, Limit: limit,
			Containers: share, Holds: holds, Guaranteed: qos == corev1.PodQOSGuaranteed,
			ManifestRequest: resourcesOf(c.Resources.Requests), ManifestLimit: resourcesOf(c.Resources.Limits),
		}
		if cp := rw.resolved.Spec.Recommend.ContainerPolicy(c.Name); cp != nil {
			in.MinAllowed, in.MaxAllowed = boundOf(cp.MinAllowed), boundOf(cp.MaxAllowed)
		}
		res := recommendOne(m, st, vpa, c.Name, in)
		if !res.Ready {
			continue
		}
		changed = changed || res.Changed
		containers = append(containers, v1alpha1.ContainerResources{Name: c.Name, Requests: valuesOf(res.Request), Limits: valuesOf(res.Limit)})
		cb := v1alpha1.ContainerBasis{Name: c.Name, Samples: res.Estimate.Samples, History: res.Estimate.History.Round(time.Second).String(),
			Confidence: res.Estimate.Confidence, TargetCPUMilli: res.Estimate.Target.CPUMilli, TargetMemoryBytes: res.Estimate.Target.MemoryBytes,
			Lower: boundBasisOf(res.Estimate.Lower), Upper: boundBasisOf(res.Estimate.Upper)}
		for _, f := range res.Refusals {
			rb := v1alpha1.RefusalBasis{Resource: v1alpha1.ResourceName(f.Resource), Field: string(f.Field), Reason: string(f.Reason), Asked: f.Asked, Held: f.Held,
				Observed: f.Observed, Threshold: f.Threshold, Message: f.String()}
			if !f.At.IsZero() {
				rb.At = &metav1.Time{Time: f.At}
			}
			cb.Refusals = append(cb.Refusals, rb)
		}
		basis.Containers = append(basis.Containers, cb)
	}
	if len(basis.Containers) == 0 {
		return nil, errNoneReady
	}
	fitPodLevel(&w.Template.Spec, containers)
	// A change not judged by its watch yet is the watch's: a new one
	// would end that watch, and the harm the first change causes would
	// go unanswered. The recommender keeps learning and records what it
	// would ask for as WatchRunning refusals; once the watch ends (a
	// rollback restored, or healthy) it recommends from what then runs.
	strategy := rw.resolved.Spec.Recommend.Strategy
	if strategy == "" {
		strategy = v1alpha1.DefaultRecommendStrategy
	}
	if t0, ok := policy.Unjudged(&existing.Status); ok {
		hold(&basis, existing.Spec.Containers, containers, t0, recommend.ReasonWatchRunning)
		containers, strategy, changed = ownContainers(existing.Spec.Containers), existing.Spec.Strategy, false
	}
	// A Degraded workload is left alone until a person resumes it or its
	// policy changes (docs/health.md): what would be asked for is
	// recorded as Degraded refusals, nothing new is written.
	if d := existing.Status.Degraded; d != nil && d.Since != nil {
		hold(&basis, existing.Spec.Containers, containers, d.Since.Time, recommend.ReasonDegraded)
		containers, strategy, changed = ownContainers(existing.Spec.Containers), existing.Spec.Strategy, false
	}
	// Nothing new is made to ask for the current values; an existing one
	// is brought to them (a latch that now holds a value at the manifest's
	// must not leave a lower one asked for).
	if len(containers) == 0 || (!changed && existing.Name == "") {
		return nil, nil
	}
	spec := v1alpha1.RightsizingRecommendationSpec{
		TargetRef:  v1alpha1.TargetRef{APIVersion: "apps/v1", Kind: ref.Kind, Name: ref.Name},
		Strategy:   strategy,
		Containers: containers,
	}
	refusals := basis.RefusalKeys()
	if existing.Name != "" && sameSpec(existing.Spec, spec) && sameRefusals(existing.Annotations, refusals) {
		return nil, nil
	}
	raw, err := basis.Encode()
	if err != nil {
		return nil, fmt.Errorf("encode the recommendation's basis: %w", err)
	}
	if existing.Name == "" {
		rsr := &v1alpha1.RightsizingRecommendation{
			ObjectMeta: metav1.ObjectMeta{Namespace: ref.Namespace, Name: ref.Name,
				Labels: map[string]string{v1alpha1.RecommendedByLabel: v1alpha1.RecommendedByKerf},
				Annotations: map[string]string{v1alpha1.RecommendationBasisAnnotation: raw,
					v1alpha1.RecommendationRefusalsAnnotation: refusals}},
			Spec: spec,
		}
		return &recommendationWrite{ref: ref, tw: tw, obj: rsr, refusals: refusalCount(basis)}, nil
	}
	// A patch that fails when the object changed since it was read, so a
	// recommendation someone took over in between is never overwritten.
	// It is made of a copy of its own: the view shares the cache's maps.
	own := existing.DeepCopy()
	from := client.MergeFromWithOptions(own.DeepCopy(), client.MergeFromWithOptimisticLock{})
	own.Spec.Strategy, own.Spec.Containers = spec.Strategy, spec.Containers
	if own.Annotations == nil {
		own.Annotations = map[string]string{}
	}
	own.Annotations[v1alpha1.RecommendationBasisAnnotation] = raw
	own.Annotations[v1alpha1.RecommendationRefusalsAnnotation] = refusals
	return &recommendationWrite{ref: ref, tw: tw, obj: own, patch: from, refusals: refusalCount(basis)}, nil
}

// hold adds to the basis a refusal with reason for each field whose
// recommended value, want, differs from what the recommendation asks
// for, asked. The refusal records what the recommender would ask for,
// held at the asked value: until the watch of the change applied at
// since ends (WatchRunning), or until the workload Degraded since then
// is resumed (Degraded).
func hold(basis *v1alpha1.RecommendationBasis, asked, want []v1alpha1.ContainerResources, since time.Time, reason recommend.Reason) {
	at := &metav1.Time{Time: since}
	for _, w := range want {
		var held v1alpha1.ContainerResources
		for _, a := range asked {
			if a.Name == w.Name {
				held = a
			}
		}
		var refusals []v1alpha1.RefusalBasis
		for _, f := range resources.Fields {
			to, from := amountOf(f, f.Get(w.Requests, w.Limits)), amountOf(f, f.Get(held.Requests, held.Limits))
			if to == from {
				continue
			}
			r := recommend.Refusal{Resource: recommend.Resource(f.Resource), Field: recommend.Request, Asked: to, Held: from,
				Reason: reason, At: since}
			if f.Limits {
				r.Field = recommend.Limit
			}
			refusals = append(refusals, v1alpha1.RefusalBasis{Resource: v1alpha1.ResourceName(r.Resource), Field: string(r.Field), Reason: string(r.Reason),
				Asked: r.Asked, Held: r.Held, At: at, Message: r.String()})
		}
		if len(refusals) == 0 {
			continue
		}
		found := false
		for i := range basis.Containers {
			if cb := &basis.Containers[i]; cb.Name == w.Name {
				cb.Refusals, found = append(refusals, cb.Refusals...), true
			}
		}
		if !found {
			basis.Containers = append(basis.Containers, v1alpha1.ContainerBasis{Name: w.Name, Refusals: refusals})
		}
	}
}

// fitPodLevel raises the (pod) entry of containers, if any, so that the
// containers' values fit it. The apiserver requires of a pod
// (resources.PodLevelExceeded) its request at least the sum of its
// containers' and sidecars' requests, and its limit at least each
// container's limit and its own request. A container's value is the
// entry's where containers changes it, else spec's. Only a field the
// entry sets is raised. The pod's history alone may ask for less than its
// containers' histories do: without it the gate PodLevelResources would
// refuse the change.
func fitPodLevel(spec *corev1.PodSpec, containers []v1alpha1.ContainerResources) {
	i := slices.IndexFunc(containers, func(e v1alpha1.ContainerResources) bool { return e.Name == v1alpha1.PodLevel })
	if i < 0 {
		return
	}
	values := func(c *corev1.Container) (request, limit recommend.Resources) {
		request, limit = resourcesOf(c.Resources.Requests), resourcesOf(c.Resources.Limits)
		if j := slices.IndexFunc(containers, func(e v1alpha1.ContainerResources) bool { return e.Name == c.Name }); j >= 0 {
			request, limit = overlay(request, containers[j].Requests), overlay(limit, containers[j].Limits)
		}
		return request, limit
	}
	var sum, top recommend.Resources
	count := func(c *corev1.Container) {
		request, limit := values(c)
		sum.CPUMilli += request.CPUMilli
		sum.MemoryBytes += request.MemoryBytes
		top = highest(top, limit)
	}
	for k := range spec.Containers {
		count(&spec.Containers[k])
	}
	for k := range spec.InitContainers {
		if c := &spec.InitContainers[k]; c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			count(c)
		}
	}
	pod := &containers[i]
	request, limit := boundOf(pod.Requests), boundOf(pod.Limits)
	raise := func(v *int64, to int64) {
		if *v > 0 && *v < to {
			*v = to
		}
	}
	raise(&request.CPUMilli, sum.CPUMilli)
	raise(&request.MemoryBytes, sum.MemoryBytes)
	raise(&limit.CPUMilli, max(top.CPUMilli, request.CPUMilli))
	raise(&limit.MemoryBytes, max(top.MemoryBytes, request.MemoryBytes))
	if request != boundOf(pod.Requests) {
		pod.Requests = valuesOf(request)
	}
	if limit != boundOf(pod.Limits) {
		pod.Limits = valuesOf(limit)
	}
}

// overlay is base with the amounts v sets.
func overlay(base recommend.Resources, v *v1alpha1.ResourceValues) recommend.Resources {
	if v == nil {
		return base
	}
	if v.CPU != nil {
		base.CPUMilli = v.CPU.MilliValue()
	}
	if v.Memory != nil {
		base.MemoryBytes = v.Memory.Value()
	}
	return base
}

// amountOf is a field's value in millicores (cpu) or bytes (memory); 0
// when absent.
func amountOf(f resources.Field, q *resource.Quantity) int64 {
	switch {
	case q == nil:
		return 0
	case f.Resource == v1alpha1.ResourceCPU:
		return q.MilliValue()
	}
	return q.Value()
}

// HoldsOf reads the cooldowns and failedPermanent of a recommendation's
// status as the latches' holds. failedPermanent holds the resources of
// status.change, both when it names none.
func HoldsOf(st *v1alpha1.RightsizingRecommendationStatus, now time.Time) recommend.Holds {
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

// boundOf reads a minAllowed or maxAllowed as millicores and bytes; an
// absent value is zero, no bound.
func boundOf(v *v1alpha1.ResourceValues) recommend.Resources {
	return overlay(recommend.Resources{}, v)
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

// ownContainers is a deep copy of a view's containers, for a spec that
// keeps what the recommendation asks for: the view's are the cache's.
func ownContainers(cs []v1alpha1.ContainerResources) []v1alpha1.ContainerResources {
	if cs == nil {
		return nil
	}
	out := make([]v1alpha1.ContainerResources, len(cs))
	for i := range cs {
		cs[i].DeepCopyInto(&out[i])
	}
	return out
}

// sameSpec reports whether two specs ask for the same values.
func sameSpec(a, b v1alpha1.RightsizingRecommendationSpec) bool {
	return a.Strategy == b.Strategy && policy.SameValues(a.Containers, b.Containers)
}

// sameRefusals reports whether a recommendation's annotations record
// the same values held back for the same reasons as refusals, a basis's
// RefusalKeys. It reads the
// refusals annotation, which the leader's cache keeps (the basis it
// drops). One written before that annotation is not the same, and is
// written once more, with it.
func sameRefusals(annotations map[string]string, refusals string) bool {
	recorded, ok := annotations[v1alpha1.RecommendationRefusalsAnnotation]
	return ok && recorded == refusals
}

// refusalCount counts the refusals of a basis, for the log.
func refusalCount(b v1alpha1.RecommendationBasis) int {
	n := 0
	for _, c := range b.Containers {
		n += len(c.Refusals)
	}
	return n
}
