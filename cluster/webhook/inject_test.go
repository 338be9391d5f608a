package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kerf-dev/kerf/api/v1alpha1"
)

func q(s string) *resource.Quantity { return ptr.To(resource.MustParse(s)) }

func rl(kv ...string) corev1.ResourceList {
	l := corev1.ResourceList{}
	for i := 0; i < len(kv); i += 2 {
		l[corev1.ResourceName(kv[i])] = resource.MustParse(kv[i+1])
	}
	return l
}

// TestInjectSetsOnlyWhatTheRecommendationSets checks the per-container
// computation: only the CPU and memory values given (and touched) change,
// everything else of the container's resources stays, and a container whose
// limit would fall below its request is left as it is.
func TestInjectSetsOnlyWhatTheRecommendationSets(t *testing.T) {
	base := func() corev1.ResourceRequirements {
		return corev1.ResourceRequirements{
			Requests: rl("cpu", "100m", "memory", "64Mi", "ephemeral-storage", "1Gi"),
			Limits:   rl("memory", "128Mi"),
			Claims:   []corev1.ResourceClaim{{Name: "gpu"}},
		}
	}
	for _, tc := range []struct {
		name     string
		values   v1alpha1.Resources
		touched  map[corev1.ResourceName]bool
		podLevel *corev1.ResourceRequirements
		want     *corev1.ResourceRequirements // nil: no change
		skip     string
	}{
		{
			name:   "cpu request only",
			values: v1alpha1.Resources{Requests: &v1alpha1.ResourceValues{CPU: q("250m")}},
			want: &corev1.ResourceRequirements{
				Requests: rl("cpu", "250m", "memory", "64Mi", "ephemeral-storage", "1Gi"),
				Limits:   rl("memory", "128Mi"),
				Claims:   []corev1.ResourceClaim{{Name: "gpu"}},
			},
		},
		{
			name: "requests and limits of both",
			values: v1alpha1.Resources{
				Requests: &v1alpha1.ResourceValues{CPU: q("1"), Memory: q("256Mi")},
				Limits:   &v1alpha1.ResourceValues{CPU: q("2"), Memory: q("512Mi")},
			},
			want: &corev1.ResourceRequirements{
				Requests: rl("cpu", "1", "memory", "256Mi", "ephemeral-storage", "1Gi"),
				Limits:   rl("cpu", "2", "memory", "512Mi"),
				Claims:   []corev1.ResourceClaim{{Name: "gpu"}},
			},
		},
		{
			name: "only the touched resource",
			values: v1alpha1.Resources{
				Requests: &v1alpha1.ResourceValues{CPU: q("1"), Memory: q("96Mi")},
			},
			touched: map[corev1.ResourceName]bool{corev1.ResourceMemory: true},
			want: &corev1.ResourceRequirements{
				Requests: rl("cpu", "100m", "memory", "96Mi", "ephemeral-storage", "1Gi"),
				Limits:   rl("memory", "128Mi"),
				Claims:   []corev1.ResourceClaim{{Name: "gpu"}},
			},
		},
		{
			name:   "same values in other units change nothing",
			values: v1alpha1.Resources{Requests: &v1alpha1.ResourceValues{CPU: q("0.1"), Memory: q("67108864")}},
		},
		{
			name:   "memory request above the pod's limit",
			values: v1alpha1.Resources{Requests: &v1alpha1.ResourceValues{Memory: q("256Mi")}},
			skip:   SkipLimitBelowRequest,
		},
		{
			name:   "cpu limit below the pod's request",
			values: v1alpha1.Resources{Limits: &v1alpha1.ResourceValues{CPU: q("50m")}},
			skip:   SkipLimitBelowRequest,
		},
		{
			name:     "pod-level request exceeded",
			values:   v1alpha1.Resources{Requests: &v1alpha1.ResourceValues{CPU: q("900m")}},
			podLevel: &corev1.ResourceRequirements{Requests: rl("cpu", "1")},
			skip:     SkipPodResources,
		},
		{
			name:     "pod-level limit exceeded",
			values:   v1alpha1.Resources{Limits: &v1alpha1.ResourceValues{Memory: q("1Gi")}},
			podLevel: &corev1.ResourceRequirements{Limits: rl("memory", "512Mi")},
			skip:     SkipPodResources,
		},
		{
			name:     "within the pod-level resources",
			values:   v1alpha1.Resources{Requests: &v1alpha1.ResourceValues{CPU: q("400m")}},
			podLevel: &corev1.ResourceRequirements{Requests: rl("cpu", "1"), Limits: rl("memory", "512Mi")},
			want: &corev1.ResourceRequirements{
				Requests: rl("cpu", "400m", "memory", "64Mi", "ephemeral-storage", "1Gi"),
				Limits:   rl("memory", "128Mi"),
				Claims:   []corev1.ResourceClaim{{Name: "gpu"}},
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := &corev1.Pod{Spec: corev1.PodSpec{
				Containers: []corev1.Container{
					{Name: "sidecar", Resources: corev1.ResourceRequirements{Requests: rl("cpu", "500m")}},
					{Name: "app", Resources: base()},
				},
				Resources: tc.podLevel,
			}}
			before := pod.DeepCopy()
			changes, skips := inject(pod, map[string]v1alpha1.Resources{"app": tc.values, "absent": tc.values}, tc.touched)
			assert.Equal(t, before, pod, "inject does not change the pod")
			if tc.skip != "" {
				assert.Empty(t, changes)
				require.Len(t, skips, 1)
				assert.Equal(t, "app", skips[0].container)
				assert.Equal(t, tc.skip, skips[0].reason)
				return
			}
			assert.Empty(t, skips)
			if tc.want == nil {
				assert.Empty(t, changes)
				return
			}
			require.Len(t, changes, 1)
			assert.Equal(t, 1, changes[0].index)
			assertResources(t, *tc.want, changes[0].resources)
		})
	}
}

func assertResources(t *testing.T, want, got corev1.ResourceRequirements) {
	t.Helper()
	for _, l := range []struct {
		name      string
		want, got corev1.ResourceList
	}{{"requests", want.Requests, got.Requests}, {"limits", want.Limits, got.Limits}} {
		assert.Len(t, l.got, len(l.want), l.name)
		for k, w := range l.want {
			g, ok := l.got[k]
			if assert.True(t, ok, "%s %s missing", l.name, k) {
				assert.Zero(t, w.Cmp(g), "%s %s: want %s, got %s", l.name, k, w.String(), g.String())
			}
		}
	}
	assert.Equal(t, want.Claims, got.Claims)
}

// TestInjectSetsPodLevelValuesWhereThePodSetsThem: the (pod) entry sets
// spec.resources, judged with the containers' new values, and the patch
// replaces /spec/resources. A pod without pod-level resources gets none.
func TestInjectSetsPodLevelValuesWhereThePodSetsThem(t *testing.T) {
	pod := &corev1.Pod{Spec: corev1.PodSpec{
		Containers: []corev1.Container{{Name: "app", Resources: corev1.ResourceRequirements{Requests: rl("memory", "256Mi"), Limits: rl("memory", "300Mi")}}},
		Resources:  &corev1.ResourceRequirements{Requests: rl("cpu", "500m", "memory", "256Mi"), Limits: rl("memory", "512Mi")},
	}}
	values := map[string]v1alpha1.Resources{v1alpha1.PodLevel: {Limits: &v1alpha1.ResourceValues{Memory: q("384Mi")}}}
	changes, skips := inject(pod, values, nil)
	assert.Empty(t, skips)
	require.Len(t, changes, 1)
	assert.Equal(t, v1alpha1.PodLevel, changes[0].name(pod))
	assertResources(t, corev1.ResourceRequirements{Requests: rl("cpu", "500m", "memory", "256Mi"), Limits: rl("memory", "384Mi")}, changes[0].resources)
	raw, err := jsonPatch(pod, changes, "web/abc")
	require.NoError(t, err)
	assert.Contains(t, string(raw), `{"op":"add","path":"/spec/resources","value":{"limits":{"memory":"384Mi"},"requests":{"cpu":"500m","memory":"256Mi"}}}`)

	// Below the container's own limit: the pod would be refused.
	values[v1alpha1.PodLevel] = v1alpha1.Resources{Limits: &v1alpha1.ResourceValues{Memory: q("280Mi")}}
	changes, skips = inject(pod, values, nil)
	assert.Empty(t, changes)
	require.Len(t, skips, 1)
	assert.Equal(t, SkipPodResources, skips[0].reason)

	pod.Spec.Resources = nil
	changes, skips = inject(pod, values, nil)
	assert.Empty(t, changes, "no pod-level values are added to a pod that sets none")
	assert.Empty(t, skips)
}

// TestActiveOnlyForAppliedInPlaceOrDeferred checks which phases and
// strategies give their values to new pods (docs/design.md sections 2, 4).
func TestActiveOnlyForAppliedInPlaceOrDeferred(t *testing.T) {
	phases := map[v1alpha1.Phase]bool{
		v1alpha1.PhaseApplied: true, v1alpha1.PhaseWatching: true, v1alpha1.PhaseHealthy: true,
		v1alpha1.PhaseRolledBack: false, v1alpha1.PhasePending: false, v1alpha1.PhaseBlocked: false,
		v1alpha1.PhaseFailed: false, v1alpha1.PhaseDegraded: false, "": false,
	}
	strategies := map[v1alpha1.Strategy]bool{
		v1alpha1.StrategyInPlace: true, v1alpha1.StrategyDeferred: true, v1alpha1.StrategyRollout: false,
	}
	for phase, phaseOK := range phases {
		for strategy, strategyOK := range strategies {
			r := &v1alpha1.RightsizingRecommendation{
				Spec:   v1alpha1.RightsizingRecommendationSpec{Strategy: strategy},
				Status: v1alpha1.RightsizingRecommendationStatus{Phase: phase},
			}
			assert.Equal(t, phaseOK && strategyOK, Active(r), "phase %q strategy %q", phase, strategy)
		}
	}
	r := &v1alpha1.RightsizingRecommendation{
		Spec: v1alpha1.RightsizingRecommendationSpec{Strategy: v1alpha1.StrategyInPlace},
		Status: v1alpha1.RightsizingRecommendationStatus{Phase: v1alpha1.PhaseWatching,
			Change: &v1alpha1.Change{Strategy: v1alpha1.StrategyRollout}},
	}
	assert.False(t, Active(r), "a change applied by Rollout reaches pods through the template")
	// A newer spec waits for the watch of the change: new pods get what
	// the change applied, with its strategy.
	r.Spec.Strategy, r.Status.Change.Strategy = v1alpha1.StrategyRollout, v1alpha1.StrategyInPlace
	assert.True(t, Active(r), "a held spec with strategy Rollout does not stop the watched InPlace change's values")

	// A canary not promoted yet: only the canary pods run the values, so
	// new pods get none, nor what a partial rollback of the canary kept.
	r.Status.Change.Canary = &v1alpha1.CanaryState{Pods: []string{"web-a"}, Of: 3}
	assert.False(t, Active(r), "new pods get no values before the canary is promoted")
	r.Status.Phase, r.Status.Breach = v1alpha1.PhaseRolledBack, &v1alpha1.Breach{Resources: []v1alpha1.ResourceName{"memory"}}
	r.Spec.Strategy = v1alpha1.StrategyInPlace
	r.Status.Change.Containers = []v1alpha1.ContainerChange{{Name: "app"}}
	r.Status.Change.Resources = []v1alpha1.ResourceName{"cpu", "memory"}
	_, _, ok := newPodValues(r)
	assert.False(t, ok, "a canary's partial rollback keeps nothing for new pods")
	promoted := metav1.Now()
	r.Status.Change.Canary.PromotedAt = &promoted
	_, touched, ok := newPodValues(r)
	assert.True(t, ok, "a promoted change's partial rollback keeps cpu for new pods")
	assert.Equal(t, map[corev1.ResourceName]bool{"cpu": true}, touched)
	r.Status.Phase, r.Status.Breach = v1alpha1.PhaseWatching, nil
	assert.True(t, Active(r), "new pods get the values once the canary is promoted")
}

// TestNewPodValuesPreferWhatTheLeaderApplied checks the source of the
// injected values: status.change when it records containers, else the spec
// unless the status describes an older spec.
func TestNewPodValuesPreferWhatTheLeaderApplied(t *testing.T) {
	spec := []v1alpha1.ContainerResources{{Name: "app", Requests: &v1alpha1.ResourceValues{CPU: q("250m")}}}
	applied := []v1alpha1.ContainerChange{{Name: "app", Applied: v1alpha1.Resources{Requests: &v1alpha1.ResourceValues{CPU: q("300m")}}}}
	rec := func(gen, observed int64, change *v1alpha1.Change) *v1alpha1.RightsizingRecommendation {
		return &v1alpha1.RightsizingRecommendation{
			ObjectMeta: metav1.ObjectMeta{Generation: gen},
			Spec:       v1alpha1.RightsizingRecommendationSpec{Strategy: v1alpha1.StrategyDeferred, Containers: spec},
			Status:     v1alpha1.RightsizingRecommendationStatus{Phase: v1alpha1.PhaseApplied, ObservedGeneration: observed, Change: change},
		}
	}
	for _, tc := range []struct {
		name    string
		r       *v1alpha1.RightsizingRecommendation
		wantCPU string
		touched map[corev1.ResourceName]bool
	}{
		{"status change", rec(2, 1, &v1alpha1.Change{Containers: applied, Resources: []v1alpha1.ResourceName{"cpu"}}), "300m", map[corev1.ResourceName]bool{"cpu": true}},
		{"spec without a change", rec(1, 1, nil), "250m", nil},
		{"spec, generation not observed", rec(1, 0, nil), "250m", nil},
		{"stale spec", rec(2, 1, nil), "", nil},
		{"change without containers, stale spec", rec(3, 2, &v1alpha1.Change{}), "", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			values, touched, ok := newPodValues(tc.r)
			if tc.wantCPU == "" {
				assert.False(t, ok)
				return
			}
			require.True(t, ok)
			assert.Equal(t, tc.wantCPU, values["app"].Requests.CPU.String())
			assert.Equal(t, tc.touched, touched)
		})
	}
}

// TestJSONPatchAnnotatesThePod checks the patch's paths: whole resources
// per changed container and the annotation, escaped, whether or not the pod
// has annotations.
func TestJSONPatchAnnotatesThePod(t *testing.T) {
	changes := []containerChange{{index: 1, resources: corev1.ResourceRequirements{Requests: rl("cpu", "300m")}}}
	for _, tc := range []struct {
		name        string
		annotations map[string]string
		wantPath    string
		wantValue   any
	}{
		{"no annotations", nil, "/metadata/annotations", map[string]any{InjectedAnnotation: "r/fp"}},
		{"annotations", map[string]string{"a": "b"}, "/metadata/annotations/kerf.dev~1injected", "r/fp"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := jsonPatch(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: tc.annotations}}, changes, "r/fp")
			require.NoError(t, err)
			var ops []map[string]any
			require.NoError(t, json.Unmarshal(b, &ops))
			require.Len(t, ops, 2)
			assert.Equal(t, map[string]any{"op": "add", "path": "/spec/containers/1/resources",
				"value": map[string]any{"requests": map[string]any{"cpu": "300m"}}}, ops[0])
			assert.Equal(t, map[string]any{"op": "add", "path": tc.wantPath, "value": tc.wantValue}, ops[1])
		})
	}
}

// brokenReader fails every read, or panics.
type brokenReader struct{ panic bool }

func (b brokenReader) Get(context.Context, client.ObjectKey, client.Object, ...client.GetOption) error {
	if b.panic {
		panic("broken reader")
	}
	return errors.New("apiserver unreachable")
}

func (b brokenReader) List(context.Context, client.ObjectList, ...client.ListOption) error {
	return b.Get(context.Background(), client.ObjectKey{}, nil)
}

func review(t *testing.T, h http.Handler, req *admissionv1.AdmissionRequest) (*httptest.ResponseRecorder, *admissionv1.AdmissionResponse) {
	t.Helper()
	body, err := json.Marshal(admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request:  req,
	})
	require.NoError(t, err)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, Path, bytes.NewReader(body)))
	if rec.Code != http.StatusOK {
		return rec, nil
	}
	var out admissionv1.AdmissionReview
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &out))
	assert.Equal(t, "AdmissionReview", out.Kind)
	assert.Equal(t, "admission.k8s.io/v1", out.APIVersion)
	require.NotNil(t, out.Response)
	return rec, out.Response
}

func podRequest(t *testing.T, pod *corev1.Pod) *admissionv1.AdmissionRequest {
	raw, err := json.Marshal(pod)
	require.NoError(t, err)
	return &admissionv1.AdmissionRequest{
		UID:       "3c4b7f7e-0000-4000-8000-000000000001",
		Kind:      metav1.GroupVersionKind{Version: "v1", Kind: "Pod"},
		Resource:  metav1.GroupVersionResource{Version: "v1", Resource: "pods"},
		Namespace: "shop",
		Operation: admissionv1.Create,
		Object:    runtime.RawExtension{Raw: raw},
	}
}

// TestHandlerFailsOpen checks that every internal error, a panic and a
// read that outlives the timeout end in "allowed, no patch", counted in
// kerf_webhook_errors_total, and that unreadable reviews get a 400.
func TestHandlerFailsOpen(t *testing.T) {
	owned := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{GenerateName: "web-", OwnerReferences: []metav1.OwnerReference{{
		APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-5d8f", UID: "u1", Controller: ptr.To(true),
	}}}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app"}}}}

	t.Run("reader error", func(t *testing.T) {
		in := NewInjector(brokenReader{}, prometheus.NewRegistry(), testLogger(t))
		rec, resp := review(t, in, podRequest(t, owned))
		require.Equal(t, http.StatusOK, rec.Code)
		assert.True(t, resp.Allowed)
		assert.Empty(t, resp.Patch)
		assert.Nil(t, resp.PatchType)
		assert.Equal(t, "3c4b7f7e-0000-4000-8000-000000000001", string(resp.UID))
		assert.Equal(t, 1.0, counterValue(t, in.errors))
		assert.Equal(t, 1.0, counterValue(t, in.injections.WithLabelValues(ResultError)))
	})
	t.Run("panic", func(t *testing.T) {
		in := NewInjector(brokenReader{panic: true}, prometheus.NewRegistry(), testLogger(t))
		_, resp := review(t, in, podRequest(t, owned))
		assert.True(t, resp.Allowed)
		assert.Empty(t, resp.Patch)
		assert.Equal(t, 1.0, counterValue(t, in.errors))
	})
	t.Run("slow reader", func(t *testing.T) {
		in := NewInjector(slowReader{}, prometheus.NewRegistry(), testLogger(t))
		in.Timeout = 50 * time.Millisecond
		_, resp := review(t, in, podRequest(t, owned))
		assert.True(t, resp.Allowed)
		assert.Empty(t, resp.Patch)
		assert.Equal(t, 1.0, counterValue(t, in.errors))
	})
	t.Run("unreadable review", func(t *testing.T) {
		in := NewInjector(brokenReader{}, prometheus.NewRegistry(), testLogger(t))
		rec := httptest.NewRecorder()
		in.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, Path, bytes.NewReader([]byte("{not json"))))
		assert.Equal(t, http.StatusBadRequest, rec.Code)
		rec = httptest.NewRecorder()
		in.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, Path, bytes.NewReader([]byte(`{"kind":"AdmissionReview"}`))))
		assert.Equal(t, http.StatusBadRequest, rec.Code)
		assert.Equal(t, 2.0, counterValue(t, in.errors))
	})
	t.Run("not a pod create", func(t *testing.T) {
		in := NewInjector(brokenReader{panic: true}, prometheus.NewRegistry(), testLogger(t))
		req := podRequest(t, owned)
		req.Operation = admissionv1.Update
		_, resp := review(t, in, req)
		assert.True(t, resp.Allowed)
		assert.Empty(t, resp.Patch)
		assert.Equal(t, 0.0, counterValue(t, in.errors))
		assert.Equal(t, 1.0, counterValue(t, in.injections.WithLabelValues(ResultIgnored)))
	})
	t.Run("caches not synced", func(t *testing.T) {
		// A replica still syncing could read a recommendation as it was
		// before its rollback: nothing is read, the pod goes unchanged.
		in := NewInjector(brokenReader{panic: true}, prometheus.NewRegistry(), testLogger(t))
		synced := false
		in.Synced = func() bool { return synced }
		_, resp := review(t, in, podRequest(t, owned))
		assert.True(t, resp.Allowed)
		assert.Empty(t, resp.Patch)
		assert.Equal(t, 0.0, counterValue(t, in.errors), "the reader was never asked")
		assert.Equal(t, 1.0, counterValue(t, in.injections.WithLabelValues(ResultNotSynced)))
		synced = true
		_, resp = review(t, in, podRequest(t, owned))
		assert.True(t, resp.Allowed)
		assert.Equal(t, 1.0, counterValue(t, in.errors), "once synced the reader is asked (here it panics)")
	})
	t.Run("pod without a controller is not looked up", func(t *testing.T) {
		in := NewInjector(brokenReader{panic: true}, prometheus.NewRegistry(), testLogger(t))
		_, resp := review(t, in, podRequest(t, &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app"}}}}))
		assert.True(t, resp.Allowed)
		assert.Empty(t, resp.Patch)
		assert.Equal(t, 1.0, counterValue(t, in.injections.WithLabelValues(ResultNoWorkload)))
	})
}

// slowReader blocks until its context ends.
type slowReader struct{}

func (slowReader) Get(ctx context.Context, _ client.ObjectKey, _ client.Object, _ ...client.GetOption) error {
	<-ctx.Done()
	return ctx.Err()
}

func (s slowReader) List(ctx context.Context, _ client.ObjectList, _ ...client.ListOption) error {
	return s.Get(ctx, client.ObjectKey{}, nil)
}

// counterValue reads a counter.
func counterValue(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	require.NoError(t, c.Write(&m))
	return m.GetCounter().GetValue()
}
