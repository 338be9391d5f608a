package apply_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/cluster/apply"
	kerfworkload "github.com/kerf-dev/kerf/cluster/workload"
	"github.com/kerf-dev/kerf/internal/kube"
)

var (
	allKinds      = []v1alpha1.WorkloadKind{v1alpha1.KindDeployment, v1alpha1.KindStatefulSet, v1alpha1.KindDaemonSet}
	allStrategies = []v1alpha1.Strategy{v1alpha1.StrategyInPlace, v1alpha1.StrategyRollout, v1alpha1.StrategyDeferred}
)

// The app container's resources before and after the recommendation the
// strategy tests apply: requests.cpu 500m → 750m, limits.memory 512Mi → 768Mi.
var (
	appBefore  = requirements("500m", "256Mi", "1", "512Mi")
	appAfter   = requirements("750m", "256Mi", "1", "768Mi")
	sidecarNow = requirements("100m", "64Mi", "200m", "128Mi")
)

// resourceVersions snapshots the resourceVersion of the workload and its pods.
func (e *env) resourceVersions(w *workload) map[string]string {
	out := map[string]string{"workload": e.reread(w.obj).GetResourceVersion()}
	for _, p := range w.pods {
		out[p.Name] = e.pod(p.Name).ResourceVersion
	}
	return out
}

func podNames(w *workload) []string {
	var out []string
	for _, p := range w.pods {
		out = append(out, p.Name)
	}
	return out
}

func touchedNames(res *apply.Result) []string {
	var out []string
	for _, o := range res.Touched {
		out = append(out, o.Kind+"/"+o.Name)
	}
	return out
}

func TestApplyMakesValuesRunWithEachStrategyOnEachKindAndIsIdempotent(t *testing.T) {
	for _, kind := range allKinds {
		for _, strategy := range allStrategies {
			t.Run(fmt.Sprintf("%s/%s", kind, strategy), func(t *testing.T) {
				e := newEnv(t)
				w := e.createWorkload(kind, "web", workloadOpts{})
				rsr := e.rsr(w, strategy, values("app", "750m", "", "", "768Mi"))

				change, err := e.plan(rsr)
				require.NoError(t, err)
				require.NotNil(t, change)
				assert.Equal(t, strategy, change.Strategy)
				assert.True(t, change.AppliedAt.Time.Equal(t0), "appliedAt is the injected clock")
				assert.Equal(t, []v1alpha1.ResourceName{v1alpha1.ResourceCPU, v1alpha1.ResourceMemory}, change.Resources)
				require.Len(t, change.Containers, 1, "only the named container")
				cc := change.Containers[0]
				assert.Equal(t, "app", cc.Name)
				assert.Equal(t, "500m", cc.Previous.Requests.CPU.String())
				assert.Equal(t, "512Mi", cc.Previous.Limits.Memory.String())
				assert.Nil(t, cc.Previous.Requests.Memory, "only the fields the recommendation sets")
				assert.Nil(t, cc.Previous.Limits.CPU, "only the fields the recommendation sets")
				assert.Equal(t, "750m", cc.Applied.Requests.CPU.String())
				assert.Equal(t, "768Mi", cc.Applied.Limits.Memory.String())
				assert.Nil(t, change.HPA)

				res, err := e.applier.Apply(e.ctx, rsr, change)
				require.NoError(t, err)
				assert.Empty(t, res.Failed)

				tmpl := templateOf(e.reread(w.obj))
				switch strategy {
				case v1alpha1.StrategyInPlace:
					assertResources(t, appBefore, resourcesOf(&tmpl.Spec, "app"), "InPlace leaves the template alone")
					var want []string
					for _, p := range w.pods {
						got := e.pod(p.Name)
						assertResources(t, appAfter, resourcesOf(&got.Spec, "app"), "pod %s resized", p.Name)
						assertResources(t, sidecarNow, resourcesOf(&got.Spec, "sidecar"), "pod %s sidecar untouched", p.Name)
						assert.Equal(t, p.Generation+1, got.Generation, "the resize changed the pod's spec")
						want = append(want, "Pod/"+p.Name)
					}
					assert.Equal(t, want, touchedNames(res))
					assert.Equal(t, podNames(w), res.Pending, "no kubelet has actuated the resize yet")
				case v1alpha1.StrategyRollout:
					assertResources(t, appAfter, resourcesOf(&tmpl.Spec, "app"), "Rollout patches the template")
					assertResources(t, sidecarNow, resourcesOf(&tmpl.Spec, "sidecar"))
					for _, p := range w.pods {
						assertResources(t, appBefore, resourcesOf(&e.pod(p.Name).Spec, "app"), "Rollout leaves running pods to the controller")
					}
					assert.Equal(t, []string{string(kind) + "/web"}, touchedNames(res))
					assert.Equal(t, e.reread(w.obj).GetResourceVersion(), res.Touched[0].ResourceVersion)
					assert.Empty(t, res.Pending)
				case v1alpha1.StrategyDeferred:
					assertResources(t, appBefore, resourcesOf(&tmpl.Spec, "app"), "Deferred leaves a rolling template alone")
					for _, p := range w.pods {
						assertResources(t, appBefore, resourcesOf(&e.pod(p.Name).Spec, "app"))
					}
					assert.Empty(t, res.Touched)
					assert.Empty(t, res.Pending)
					assert.Contains(t, res.Notes[0], "webhook")
				}

				// Idempotence: the same inputs again write nothing and report the same.
				before := e.resourceVersions(w)
				again, err := e.applier.Apply(e.ctx, rsr, change)
				require.NoError(t, err)
				assert.Equal(t, res, again, "the second apply reports the same result")
				assert.Equal(t, before, e.resourceVersions(w), "the second apply writes nothing")

				if strategy == v1alpha1.StrategyInPlace {
					// The kubelet actuates the resizes: nothing is pending any more.
					for _, p := range w.pods {
						e.kubeletReports(p.Name)
					}
					done, err := e.applier.Apply(e.ctx, rsr, change)
					require.NoError(t, err)
					assert.Empty(t, done.Pending)
					assert.Empty(t, done.Failed)
					assert.Len(t, done.Touched, len(w.pods))
				}
			})
		}
	}
}

func TestDeferredPatchesTheTemplateOnlyWhenTheUpdateStrategyIsOnDelete(t *testing.T) {
	cases := []struct {
		name     string
		kind     v1alpha1.WorkloadKind
		onDelete bool
		patched  bool
	}{
		{"Deployment", v1alpha1.KindDeployment, false, false},
		{"StatefulSet RollingUpdate", v1alpha1.KindStatefulSet, false, false},
		{"StatefulSet OnDelete", v1alpha1.KindStatefulSet, true, true},
		{"DaemonSet RollingUpdate", v1alpha1.KindDaemonSet, false, false},
		{"DaemonSet OnDelete", v1alpha1.KindDaemonSet, true, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			w := e.createWorkload(tc.kind, "db", workloadOpts{onDelete: tc.onDelete})
			rsr := e.rsr(w, v1alpha1.StrategyDeferred, values("app", "750m", "", "", "768Mi"))
			change, err := e.plan(rsr)
			require.NoError(t, err)
			rvBefore := e.reread(w.obj).GetResourceVersion()

			res, err := e.applier.Apply(e.ctx, rsr, change)
			require.NoError(t, err)

			got := e.reread(w.obj)
			tmpl := templateOf(got)
			if tc.patched {
				assertResources(t, appAfter, resourcesOf(&tmpl.Spec, "app"))
				assert.NotEqual(t, rvBefore, got.GetResourceVersion())
				assert.Equal(t, []string{string(tc.kind) + "/db"}, touchedNames(res))
			} else {
				assertResources(t, appBefore, resourcesOf(&tmpl.Spec, "app"))
				assert.Equal(t, rvBefore, got.GetResourceVersion(), "the workload is not written")
				assert.Empty(t, res.Touched)
			}
			for _, p := range w.pods {
				assertResources(t, appBefore, resourcesOf(&e.pod(p.Name).Spec, "app"), "Deferred never resizes pods")
			}
		})
	}
}

func TestPlanReturnsNilWhenTheValuesAlreadyRun(t *testing.T) {
	for _, strategy := range allStrategies {
		t.Run(string(strategy), func(t *testing.T) {
			e := newEnv(t)
			w := e.createWorkload(v1alpha1.KindDeployment, "web", workloadOpts{})
			// 0.5 is 500m: the same amount written differently.
			rsr := e.rsr(w, strategy, values("app", "0.5", "256Mi", "", "512Mi"), values("sidecar", "100m", "", "", ""))
			change, err := e.plan(rsr)
			require.NoError(t, err)
			assert.Nil(t, change)
		})
	}
}

func TestPlanRecordsOnlyContainersWhoseValuesDiffer(t *testing.T) {
	e := newEnv(t)
	w := e.createWorkload(v1alpha1.KindStatefulSet, "db", workloadOpts{})
	rsr := e.rsr(w, v1alpha1.StrategyRollout,
		values("app", "500m", "300Mi", "", ""), // memory differs, cpu the same
		values("sidecar", "100m", "64Mi", "", ""))
	change, err := e.plan(rsr)
	require.NoError(t, err)
	require.NotNil(t, change)
	assert.Equal(t, []v1alpha1.ResourceName{v1alpha1.ResourceMemory}, change.Resources, "cpu is not touched")
	require.Len(t, change.Containers, 1)
	assert.Equal(t, "app", change.Containers[0].Name)
	assert.Equal(t, "256Mi", change.Containers[0].Previous.Requests.Memory.String())
	assert.Equal(t, "500m", change.Containers[0].Applied.Requests.CPU.String(), "named fields of a changed container are kept")
	assert.Nil(t, change.Containers[0].Applied.Limits)
}

func TestPlanRefusesValuesThatCannotRun(t *testing.T) {
	cases := []struct {
		name     string
		strategy v1alpha1.Strategy
		values   v1alpha1.ContainerResources
		err      error
	}{
		{"unknown container", v1alpha1.StrategyRollout, values("nope", "1", "", "", ""), apply.ErrContainerNotFound},
		{"request above the limit the workload keeps", v1alpha1.StrategyRollout, values("app", "2", "", "", ""), apply.ErrInvalidValues},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			w := e.createWorkload(v1alpha1.KindDeployment, "web", workloadOpts{containers: []corev1.Container{appContainer()}})
			_, err := e.plan(e.rsr(w, tc.strategy, tc.values))
			require.ErrorIs(t, err, tc.err)
		})
	}
}

func TestPlanForInPlaceTakesPreviousValuesFromTheRunningPods(t *testing.T) {
	e := newEnv(t)
	w := e.createWorkload(v1alpha1.KindDeployment, "web", workloadOpts{})
	// An earlier in-place change left both pods at 600m.
	first := e.rsr(w, v1alpha1.StrategyInPlace, values("app", "600m", "", "", ""))
	e.planAndApply(first)

	_, running, err := e.running(first)
	require.NoError(t, err)
	assert.Equal(t, "600m", running[0].Requests.CPU.String(), "Running reports what the pods run")

	next, err := e.plan(e.rsr(w, v1alpha1.StrategyInPlace, values("app", "700m", "", "", "")))
	require.NoError(t, err)
	assert.Equal(t, "600m", next.Containers[0].Previous.Requests.CPU.String())

	// Rollout compares with the template, still at 500m.
	rollout, err := e.plan(e.rsr(w, v1alpha1.StrategyRollout, values("app", "700m", "", "", "")))
	require.NoError(t, err)
	assert.Equal(t, "500m", rollout.Containers[0].Previous.Requests.CPU.String())
}

func TestWorkloadRefusesUnsupportedTargets(t *testing.T) {
	e := newEnv(t)
	w := e.createWorkload(v1alpha1.KindDeployment, "web", workloadOpts{})
	rsr := e.rsr(w, v1alpha1.StrategyRollout, values("app", "1", "", "", ""))
	rsr.Spec.TargetRef.Kind = "ReplicaSet"
	_, _, err := e.running(rsr)
	require.ErrorIs(t, err, kerfworkload.ErrUnsupportedKind)

	rsr.Spec.TargetRef.Kind = v1alpha1.KindDeployment
	rsr.Spec.TargetRef.Name = "missing"
	_, _, err = e.running(rsr)
	require.True(t, apierrors.IsNotFound(err), "not found is reported as such: %v", err)
}

func TestRolloutPatchIsConditionalOnResourceVersion(t *testing.T) {
	e := newEnv(t)
	w := e.createWorkload(v1alpha1.KindDeployment, "web", workloadOpts{})
	rsr := e.rsr(w, v1alpha1.StrategyRollout, values("app", "750m", "", "", "768Mi"))
	change, err := e.plan(rsr)
	require.NoError(t, err)

	// Someone else writes the Deployment between Kerf's read and its patch.
	c, err := client.NewWithWatch(e.cp.Config, client.Options{Scheme: kube.Scheme})
	require.NoError(t, err)
	racing := interceptor.NewClient(c, interceptor.Funcs{
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			if d, ok := obj.(*appsv1.Deployment); ok {
				other := &appsv1.Deployment{}
				require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(d), other))
				other.Annotations = map[string]string{"someone": "else"}
				require.NoError(t, c.Update(ctx, other))
			}
			return c.Patch(ctx, obj, patch, opts...)
		},
	})
	a := &apply.Applier{Client: racing, Clientset: e.cp.Clientset, Now: e.clock.Now}
	_, err = a.Apply(e.ctx, rsr, change)
	require.Error(t, err)
	assert.True(t, apierrors.IsConflict(err), "a conflict is returned for the caller to retry: %v", err)
	assertResources(t, appBefore, resourcesOf(&templateOf(e.reread(w.obj)).Spec, "app"), "nothing was written")

	// The caller retries: this time it goes through.
	res, err := e.applier.Apply(e.ctx, rsr, change)
	require.NoError(t, err)
	assert.Len(t, res.Touched, 1)
	assertResources(t, appAfter, resourcesOf(&templateOf(e.reread(w.obj)).Spec, "app"))
}

func TestApplyWithoutAChangeIsAnError(t *testing.T) {
	a := &apply.Applier{}
	_, err := a.Apply(context.Background(), &v1alpha1.RightsizingRecommendation{}, nil)
	require.Error(t, err)
	_, err = a.Restore(context.Background(), &v1alpha1.RightsizingRecommendation{}, nil, nil, nil, nil)
	require.Error(t, err)
}
