package recommender

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	vpav1 "k8s.io/autoscaler/vertical-pod-autoscaler/pkg/apis/autoscaling.k8s.io/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/cluster/recommend"
	"github.com/kerf-dev/kerf/cluster/workload"
)

// Why a workload whose policy says source VPA got no recommendation: the
// reason label of kerf_recommender_vpa_skipped_total, and the log's.
const (
	// vpaNoCRD: the VerticalPodAutoscaler CRD is not installed.
	vpaNoCRD = "NoCRD"
	// vpaNone: no VPA in the namespace targets the workload.
	vpaNone = "NoVPA"
	// vpaMultiple: more than one VPA targets the workload; Kerf takes none.
	vpaMultiple = "MultipleVPAs"
	// vpaActive: the VPA's updateMode changes the pods itself (Recreate,
	// Auto, InPlaceOrRecreate, InPlace, or unset, which is Recreate);
	// Kerf does not fight it.
	vpaActive = "UpdateModeActive"
	// vpaNoRecommendation: the VPA has no target yet.
	vpaNoRecommendation = "NoRecommendation"
	// vpaReadFailed: the VPAs could not be read.
	vpaReadFailed = "ReadFailed"
)

// Bounds of the VPA source.
const (
	// vpaAbsentRecheck is how long a CRD found missing is not looked for
	// again (each look is a discovery request).
	vpaAbsentRecheck = time.Minute
	// vpaPageSize and vpaMaxPages bound one namespace's list per pass.
	vpaPageSize = 250
	vpaMaxPages = 4
	// vpaMaxRemembered bounds the last skip reasons remembered per
	// workload (they decide the log level).
	vpaMaxRemembered = 10_000
)

// vpaListGVK is the list kind of VerticalPodAutoscalers.
var vpaListGVK = vpav1.SchemeGroupVersion.WithKind("VerticalPodAutoscalerList")

// vpaSource reads, for spec.recommend.source VPA, the target of the
// workload's VerticalPodAutoscaler (docs/recommender.md, "VPA as a
// source"). Reads are of unstructured objects, which the manager's client
// serves from the apiserver, never from its cache: no informer is started,
// so a cluster without the VPA CRD syncs and runs as any other. One
// namespace is listed at most once per pass.
type vpaSource struct {
	client  client.Client
	log     *slog.Logger
	skipped *prometheus.CounterVec
	// absentUntil: the CRD was found missing; it is not looked for again
	// before.
	absentUntil time.Time
	// tick and lists are one pass's lists by namespace.
	tick  uint64
	lists map[string]vpaList
	// last is the last skip reason by workload ("" once it had targets).
	last map[workload.Ref]string
}

// vpaList is one namespace's VPAs, or why they are not known.
type vpaList struct {
	items  []vpav1.VerticalPodAutoscaler
	reason string
	err    error
}

// vpaTargets are the targets a VPA gives, per container name.
type vpaTargets struct {
	name       string
	mode       vpav1.UpdateMode
	containers map[string]recommend.External
}

// newVPASource returns the VPA source with its metric on reg.
func newVPASource(c client.Client, reg prometheus.Registerer, log *slog.Logger) (*vpaSource, error) {
	skipped := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kerf_recommender_vpa_skipped_total",
		Help: "Recommendations not made for a workload whose policy takes its targets from a VerticalPodAutoscaler, by reason (NoCRD, NoVPA, MultipleVPAs, UpdateModeActive, NoRecommendation, ReadFailed).",
	}, []string{"reason"})
	if err := reg.Register(skipped); err != nil {
		return nil, fmt.Errorf("register the VPA source's metric: %w", err)
	}
	return &vpaSource{client: c, log: log, skipped: skipped, lists: map[string]vpaList{}, last: map[workload.Ref]string{}}, nil
}

// targets returns the targets of the workload's VPA, or nil when there is
// none to take. The error is the read's, when reading failed.
//
// Without targets the reason is counted and logged: at debug while there
// is nothing to take, at warning when a VPA is refused, once per change of
// reason.
func (v *vpaSource) targets(ctx context.Context, ref workload.Ref, tick uint64, now time.Time) (*vpaTargets, error) {
	t, reason, err := v.find(ctx, ref, tick, now)
	if t != nil {
		v.remember(ref, "")
		return t, nil
	}
	v.skipped.WithLabelValues(reason).Inc()
	changed := v.remember(ref, reason)
	level := slog.LevelDebug
	if changed && (reason == vpaActive || reason == vpaMultiple) {
		level = slog.LevelWarn
	}
	args := []any{"workload", ref.String(), "namespace", ref.Namespace, "reason", reason}
	if err != nil {
		args = append(args, "err", err)
	}
	v.log.Log(ctx, level, "no recommendation from the workload's VerticalPodAutoscaler", args...)
	if reason != vpaReadFailed {
		return nil, nil // a refusal or nothing yet, logged: not a failed pass
	}
	return nil, err
}

// find looks the workload's VPA up and reads its targets, or says why not.
func (v *vpaSource) find(ctx context.Context, ref workload.Ref, tick uint64, now time.Time) (*vpaTargets, string, error) {
	list := v.list(ctx, ref.Namespace, tick, now)
	if list.reason != "" {
		return nil, list.reason, list.err
	}
	var found *vpav1.VerticalPodAutoscaler
	for i := range list.items {
		vpa := &list.items[i]
		if tr := vpa.Spec.TargetRef; tr != nil && ref.Targets(vpa.Namespace,
			v1alpha1.TargetRef{APIVersion: tr.APIVersion, Kind: v1alpha1.WorkloadKind(tr.Kind), Name: tr.Name}) {
			if found != nil {
				return nil, vpaMultiple, fmt.Errorf("VerticalPodAutoscalers %s and %s both target %s", found.Name, vpa.Name, ref)
			}
			found = vpa
		}
	}
	if found == nil {
		return nil, vpaNone, nil
	}
	mode, ok := vpaModeOf(found)
	if !ok {
		return nil, vpaActive, fmt.Errorf("VerticalPodAutoscaler %s has updateMode %s and changes the pods itself; Kerf takes targets only from one in Off or Initial", found.Name, mode)
	}
	t := &vpaTargets{name: found.Name, mode: mode, containers: map[string]recommend.External{}}
	if rec := found.Status.Recommendation; rec != nil {
		for _, cr := range rec.ContainerRecommendations {
			ext := recommend.External{Target: resourcesOf(cr.Target), Lower: resourcesOf(cr.LowerBound), Upper: resourcesOf(cr.UpperBound)}
			if ext.Target != (recommend.Resources{}) {
				t.containers[cr.ContainerName] = ext
			}
		}
	}
	if len(t.containers) == 0 {
		return nil, vpaNoRecommendation, nil
	}
	return t, "", nil
}

// vpaModeOf returns the VPA's updateMode and whether Kerf may take its
// target. Unset is VPA's default, Recreate. Kerf takes targets only in Off
// and Initial, the modes in which VPA does not change running pods.
func vpaModeOf(vpa *vpav1.VerticalPodAutoscaler) (vpav1.UpdateMode, bool) {
	mode := vpav1.UpdateModeRecreate
	if p := vpa.Spec.UpdatePolicy; p != nil && p.UpdateMode != nil {
		mode = *p.UpdateMode
	}
	return mode, mode == vpav1.UpdateModeOff || mode == vpav1.UpdateModeInitial
}

// list returns the namespace's VPAs, read once per pass (tick), bounded to
// vpaMaxPages pages.
func (v *vpaSource) list(ctx context.Context, ns string, tick uint64, now time.Time) vpaList {
	if tick != v.tick {
		v.tick = tick
		clear(v.lists)
	}
	if l, ok := v.lists[ns]; ok {
		return l
	}
	l := v.read(ctx, ns, now)
	v.lists[ns] = l
	return l
}

// read lists the namespace's VPAs from the apiserver.
func (v *vpaSource) read(ctx context.Context, ns string, now time.Time) vpaList {
	if now.Before(v.absentUntil) {
		return vpaList{reason: vpaNoCRD}
	}
	var out vpaList
	cont := ""
	for page := 0; page < vpaMaxPages; page++ {
		u := &unstructured.UnstructuredList{}
		u.SetGroupVersionKind(vpaListGVK)
		err := v.client.List(ctx, u, client.InNamespace(ns), client.Limit(vpaPageSize), client.Continue(cont))
		if meta.IsNoMatchError(err) || apierrors.IsNotFound(err) {
			// No such kind: the CRD is not installed (or was removed).
			v.absentUntil = now.Add(vpaAbsentRecheck)
			return vpaList{reason: vpaNoCRD}
		}
		if err != nil {
			return vpaList{reason: vpaReadFailed, err: fmt.Errorf("list VerticalPodAutoscalers in %s: %w", ns, err)}
		}
		for i := range u.Items {
			var vpa vpav1.VerticalPodAutoscaler
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Items[i].Object, &vpa); err != nil {
				v.log.Debug("VerticalPodAutoscaler not readable, skipped", "namespace", ns, "name", u.Items[i].GetName(), "err", err)
				continue
			}
			out.items = append(out.items, vpa)
		}
		if cont = u.GetContinue(); cont == "" {
			return out
		}
	}
	v.log.Warn("namespace has more VerticalPodAutoscalers than the recommender reads; the rest are not looked at",
		"namespace", ns, "read", len(out.items))
	return out
}

// remember records the last skip reason of a workload and reports whether
// it changed; the memory is bounded.
func (v *vpaSource) remember(ref workload.Ref, reason string) bool {
	old, seen := v.last[ref]
	if seen && old == reason {
		return false
	}
	if len(v.last) >= vpaMaxRemembered {
		clear(v.last)
	}
	v.last[ref] = reason
	return true
}

// recommendOne runs the model for one container. It uses the VPA's
// targets when the workload takes them from its VPA (t not nil), else the
// container's own state.
func recommendOne(m *recommend.Model, st *recommend.ContainerState, t *vpaTargets, container string, in recommend.Input) recommend.Result {
	if t == nil {
		return m.Recommend(st, in)
	}
	return m.RecommendExternal(st, t.containers[container], in)
}

// fromVPA returns the targets of the workload's VPA when its policy says
// source VPA (nil for source Kerf), and records the source in the basis.
// ok is false when the workload takes its targets from a VPA and there are
// none to take (counted and logged): nothing is written.
func (r *Loop) fromVPA(ctx context.Context, ref workload.Ref, rw *resolvedWorkload, basis *v1alpha1.RecommendationBasis, now time.Time) (t *vpaTargets, ok bool, err error) {
	basis.Source = v1alpha1.RecommendSourceKerf
	if rw.resolved.Spec.Recommend.Source != v1alpha1.RecommendSourceVPA {
		return nil, true, nil
	}
	basis.Source = v1alpha1.RecommendSourceVPA
	if t, err = r.vpa.targets(ctx, ref, r.tick, now); t == nil {
		return nil, false, err
	}
	basis.VPA, basis.VPAUpdateMode = t.name, string(t.mode)
	return t, true, nil
}

// boundBasisOf is a bound for the basis; nil when unset.
func boundBasisOf(b recommend.Resources) *v1alpha1.BoundBasis {
	if b == (recommend.Resources{}) {
		return nil
	}
	return &v1alpha1.BoundBasis{CPUMilli: b.CPUMilli, MemoryBytes: b.MemoryBytes}
}
