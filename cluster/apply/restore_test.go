package apply_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/cluster/resources"
)

func TestRestoreOfMemoryOnlyLeavesCPUAsApplied(t *testing.T) {
	// requests.cpu stays at 750m, limits.memory goes back to 512Mi.
	memoryRestored := requirements("750m", "256Mi", "1", "512Mi")
	cases := []struct {
		name     string
		kind     v1alpha1.WorkloadKind
		strategy v1alpha1.Strategy
		onDelete bool
	}{
		{"InPlace resizes the pods back", v1alpha1.KindDeployment, v1alpha1.StrategyInPlace, false},
		{"Rollout patches the template back", v1alpha1.KindDeployment, v1alpha1.StrategyRollout, false},
		{"Deferred on OnDelete patches the template back", v1alpha1.KindStatefulSet, v1alpha1.StrategyDeferred, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			w := e.createWorkload(tc.kind, "web", workloadOpts{onDelete: tc.onDelete})
			e.createHPA("web", w, cpuUtilization(60))
			rsr := e.rsr(w, tc.strategy, values("app", "750m", "", "", "768Mi"))
			rsr.Spec.HPA = &v1alpha1.HPACoordination{Coordinate: true}
			change, err := e.plan(rsr)
			require.NoError(t, err)
			require.NotNil(t, change.HPA)
			_, err = e.applier.Apply(e.ctx, rsr, change)
			require.NoError(t, err)
			applied, _ := e.hpaTarget("web")

			// An OOM rollback restores memory only.
			res, err := e.applier.Restore(e.ctx, rsr, change, resources.Previous(change), []v1alpha1.ResourceName{v1alpha1.ResourceMemory}, nil)
			require.NoError(t, err)
			assert.Empty(t, res.Failed)

			tmpl := templateOf(e.reread(w.obj))
			if tc.strategy == v1alpha1.StrategyInPlace {
				assertResources(t, appBefore, resourcesOf(&tmpl.Spec, "app"), "the template was never changed")
				for _, p := range w.pods {
					assertResources(t, memoryRestored, resourcesOf(&e.pod(p.Name).Spec, "app"), p.Name)
					assertResources(t, sidecarNow, resourcesOf(&e.pod(p.Name).Spec, "sidecar"), p.Name)
				}
			} else {
				assertResources(t, memoryRestored, resourcesOf(&tmpl.Spec, "app"))
				assertResources(t, sidecarNow, resourcesOf(&tmpl.Spec, "sidecar"))
			}
			got, hpaRV := e.hpaTarget("web")
			assert.Equal(t, applied, got, "the HPA goes back only with cpu")
			assert.NotContains(t, touchedNames(res), "HorizontalPodAutoscaler/web")

			// Idempotent: a second restore writes nothing.
			before := e.resourceVersions(w)
			again, err := e.applier.Restore(e.ctx, rsr, change, resources.Previous(change), []v1alpha1.ResourceName{v1alpha1.ResourceMemory}, nil)
			require.NoError(t, err)
			assert.Equal(t, res, again)
			assert.Equal(t, before, e.resourceVersions(w))

			// A restart rollback then restores cpu too, and the HPA with it.
			_, err = e.applier.Restore(e.ctx, rsr, change, resources.Previous(change), []v1alpha1.ResourceName{v1alpha1.ResourceCPU}, nil)
			require.NoError(t, err)
			got, rvAfter := e.hpaTarget("web")
			assert.Equal(t, int32(60), got)
			assert.NotEqual(t, hpaRV, rvAfter)
			if tc.strategy == v1alpha1.StrategyInPlace {
				for _, p := range w.pods {
					assertResources(t, appBefore, resourcesOf(&e.pod(p.Name).Spec, "app"), p.Name)
				}
			} else {
				assertResources(t, appBefore, resourcesOf(&templateOf(e.reread(w.obj)).Spec, "app"))
			}
		})
	}
}

func TestRestoreOfDeferredOnARollingWorkloadWritesNothingWhenTheTemplateHasThePreviousValues(t *testing.T) {
	e := newEnv(t)
	w := e.createWorkload(v1alpha1.KindDeployment, "web", workloadOpts{})
	rsr := e.rsr(w, v1alpha1.StrategyDeferred, values("app", "750m", "", "", "768Mi"))
	change := e.planAndApply(rsr)
	before := e.resourceVersions(w)

	res, err := e.applier.Restore(e.ctx, rsr, change, resources.Previous(change), change.Resources, nil)
	require.NoError(t, err)
	assert.Equal(t, before, e.resourceVersions(w), "no pod started with the values")
	assert.Equal(t, []string{"Deployment/web", "Pod/web-0", "Pod/web-1"}, touchedNames(res), "the template and the pods carry the restored values")
	assert.Empty(t, res.Pending)
	assert.Empty(t, res.Left)
}

// injectedPod creates a running pod of the workload's current ReplicaSet
// with the app container's resources as the webhook would have given them.
func (e *env) injectedPod(w *workload, name string, app corev1.ResourceRequirements) *corev1.Pod {
	tmpl := templateOf(w.owner)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: e.ns, Name: name, Labels: tmpl.Labels,
			OwnerReferences: []metav1.OwnerReference{controllerRef(w.owner, kindOf(w.owner))},
		},
		Spec: *tmpl.Spec.DeepCopy(),
	}
	pod.Spec.NodeName = nodeName
	for i := range pod.Spec.Containers {
		if pod.Spec.Containers[i].Name == "app" {
			pod.Spec.Containers[i].Resources = app
		}
	}
	require.NoError(e.t, e.cp.Client.Create(e.ctx, pod))
	return e.kubeletReports(name)
}

// TestRestoreOfDeferredResizesBackThePodsThatStartedWithTheValues: a pod
// the webhook gave a Deferred change's values to keeps them after the
// template goes back, and an OOM-killed container restarts with its pod's
// limits, so the restore resizes that pod back in place, only the restored
// resource, and leaves the pods that run the template's values alone.
func TestRestoreOfDeferredResizesBackThePodsThatStartedWithTheValues(t *testing.T) {
	e := newEnv(t)
	w := e.createWorkload(v1alpha1.KindDeployment, "web", workloadOpts{})
	rsr := e.rsr(w, v1alpha1.StrategyDeferred, values("app", "750m", "", "", "768Mi"))
	change := e.planAndApply(rsr)
	started := e.injectedPod(w, "web-started", requirements("750m", "256Mi", "1", "768Mi"))
	before := e.resourceVersions(w)

	// An OOM rollback restores memory only.
	res, err := e.applier.Restore(e.ctx, rsr, change, resources.Previous(change), []v1alpha1.ResourceName{v1alpha1.ResourceMemory}, nil)
	require.NoError(t, err)
	assert.Empty(t, res.Failed)
	assert.Empty(t, res.Left)
	assert.Equal(t, []string{started.Name}, res.Pending, "until the kubelet reports the resize")
	assertResources(t, requirements("750m", "256Mi", "1", "512Mi"), resourcesOf(&e.pod(started.Name).Spec, "app"), "memory back, cpu as it started")
	assertResources(t, sidecarContainer().Resources, resourcesOf(&e.pod(started.Name).Spec, "sidecar"))
	assert.Equal(t, before, e.resourceVersions(w), "the template and the other pods already had the values")

	e.kubeletReports(started.Name)
	res, err = e.applier.Restore(e.ctx, rsr, change, resources.Previous(change), []v1alpha1.ResourceName{v1alpha1.ResourceMemory}, nil)
	require.NoError(t, err)
	assert.Empty(t, res.Pending)
	assert.Contains(t, touchedNames(res), "Pod/"+started.Name)
}

// TestRestoreOfRolloutOnOnDeleteResizesBackThePodsOfTheChangedTemplate:
// on an OnDelete StatefulSet, a pod recreated after a Rollout change runs
// the changed template, and nothing replaces it when the template goes
// back, so the restore resizes it back in place.
func TestRestoreOfRolloutOnOnDeleteResizesBackThePodsOfTheChangedTemplate(t *testing.T) {
	e := newEnv(t)
	w := e.createWorkload(v1alpha1.KindStatefulSet, "db", workloadOpts{onDelete: true})
	rsr := e.rsr(w, v1alpha1.StrategyRollout, values("app", "750m", "", "", "768Mi"))
	change := e.planAndApply(rsr)
	recreated := e.createPod(e.reread(w.obj), "db-recreated", true)
	assertResources(t, requirements("750m", "256Mi", "1", "768Mi"), resourcesOf(&recreated.Spec, "app"), "it started from the changed template")
	before := e.resourceVersions(w)

	res, err := e.applier.Restore(e.ctx, rsr, change, resources.Previous(change), []v1alpha1.ResourceName{v1alpha1.ResourceMemory}, nil)
	require.NoError(t, err)
	assert.Empty(t, res.Left)
	assert.Equal(t, []string{recreated.Name}, res.Pending, "until the kubelet reports the resize")
	assertResources(t, requirements("750m", "256Mi", "1", "512Mi"), resourcesOf(&e.pod(recreated.Name).Spec, "app"))
	assertResources(t, requirements("750m", "256Mi", "1", "512Mi"), resourcesOf(&templateOf(e.reread(w.obj)).Spec, "app"))
	after := e.resourceVersions(w)
	delete(before, "workload")
	delete(after, "workload")
	assert.Equal(t, before, after, "the pods of the old template already had the values")
}

// TestRestoreOfDeferredLeavesAPodItCannotResizeBack: a pod that started
// Guaranteed with a Deferred change's values cannot go back to Burstable in
// place (Kubernetes keeps a pod's QoS class); the restore does not fail on
// it, it reports the pod in Left.
func TestRestoreOfDeferredLeavesAPodItCannotResizeBack(t *testing.T) {
	e := newEnv(t)
	w := e.createWorkload(v1alpha1.KindDeployment, "web", workloadOpts{containers: []corev1.Container{appContainer()}})
	rsr := e.rsr(w, v1alpha1.StrategyDeferred, values("app", "1", "512Mi", "", ""))
	change := e.planAndApply(rsr)
	guaranteed := e.injectedPod(w, "web-guaranteed", requirements("1", "512Mi", "1", "512Mi"))
	require.Equal(t, corev1.PodQOSGuaranteed, guaranteed.Status.QOSClass)

	res, err := e.applier.Restore(e.ctx, rsr, change, resources.Previous(change), []v1alpha1.ResourceName{v1alpha1.ResourceMemory}, nil)
	require.NoError(t, err)
	assert.Empty(t, res.Failed, "the rollback is not failed for it")
	require.Len(t, res.Left, 1)
	assert.Equal(t, guaranteed.Name, res.Left[0].Pod)
	assert.Equal(t, v1alpha1.ResizeRejected, res.Left[0].Reason)
	assert.Contains(t, res.Left[0].Message, "QOS")
	assertResources(t, requirements("1", "512Mi", "1", "512Mi"), resourcesOf(&e.pod(guaranteed.Name).Spec, "app"), "left as it started")
}

func TestRestoreRemovesAValueTheWorkloadDidNotHave(t *testing.T) {
	noCPULimit := appContainer()
	delete(noCPULimit.Resources.Limits, corev1.ResourceCPU)
	for _, strategy := range []v1alpha1.Strategy{v1alpha1.StrategyRollout, v1alpha1.StrategyInPlace} {
		t.Run(string(strategy), func(t *testing.T) {
			e := newEnv(t)
			w := e.createWorkload(v1alpha1.KindDeployment, "web", workloadOpts{pods: 1, containers: []corev1.Container{noCPULimit}})
			rsr := e.rsr(w, strategy, values("app", "", "", "2", ""))
			change, err := e.plan(rsr)
			require.NoError(t, err)
			require.Nil(t, change.Containers[0].Previous.Limits, "there was no cpu limit")
			_, err = e.applier.Apply(e.ctx, rsr, change)
			require.NoError(t, err)

			res, err := e.applier.Restore(e.ctx, rsr, change, resources.Previous(change), []v1alpha1.ResourceName{v1alpha1.ResourceCPU}, nil)
			require.NoError(t, err)
			if strategy == v1alpha1.StrategyRollout {
				assertResources(t, noCPULimit.Resources, resourcesOf(&templateOf(e.reread(w.obj)).Spec, "app"), "the limit is removed")
				return
			}
			// Kubernetes cannot remove a limit in place: the pod keeps it, and says so.
			limits := resourcesOf(&e.pod(w.pods[0].Name).Spec, "app").Limits
			assert.Equal(t, "2", limits.Cpu().String())
			require.Len(t, res.Notes, 1)
			assert.Contains(t, res.Notes[0], "cannot be removed in place")
		})
	}
}

func TestRestoreToOtherValuesWritesOnlyTheFieldsTheChangeApplied(t *testing.T) {
	e := newEnv(t)
	w := e.createWorkload(v1alpha1.KindDaemonSet, "agent", workloadOpts{})
	rsr := e.rsr(w, v1alpha1.StrategyRollout, values("app", "750m", "", "", "768Mi"))
	change := e.planAndApply(rsr)

	// restoreTo LastHealthy: values that also name fields the change did
	// not apply (requests.memory) and a container it did not touch.
	lastHealthy := []v1alpha1.ContainerResources{
		values("app", "600m", "1Gi", "", "640Mi"),
		values("sidecar", "1", "1Gi", "", ""),
	}
	_, err := e.applier.Restore(e.ctx, rsr, change, lastHealthy, change.Resources, nil)
	require.NoError(t, err)
	tmpl := templateOf(e.reread(w.obj))
	assertResources(t, requirements("600m", "256Mi", "1", "640Mi"), resourcesOf(&tmpl.Spec, "app"))
	assertResources(t, sidecarNow, resourcesOf(&tmpl.Spec, "sidecar"))
}

// TestARestoreWritesTheAnnotationsWithItsTemplatePatch: the annotations a
// restore is given (the leader's kerf.dev/rollback-state mirror) are
// written by its template patch, in the same write as the values; a nil
// value removes one. With nothing to patch (the template holds the values,
// or the strategy resizes pods) nothing is written and Annotated says so:
// the caller writes them itself.
func TestARestoreWritesTheAnnotationsWithItsTemplatePatch(t *testing.T) {
	e := newEnv(t)
	w := e.createWorkload(v1alpha1.KindDeployment, "web", workloadOpts{})
	obj := e.reread(w.obj)
	obj.SetAnnotations(map[string]string{"test/old": "x"})
	require.NoError(t, e.cp.Client.Update(e.ctx, obj))
	rsr := e.rsr(w, v1alpha1.StrategyRollout, values("app", "750m", "", "", "768Mi"))
	change := e.planAndApply(rsr)
	applied := e.reread(w.obj).GetResourceVersion()

	watch, err := e.cp.Clientset.AppsV1().Deployments(w.obj.GetNamespace()).Watch(e.ctx,
		metav1.ListOptions{FieldSelector: "metadata.name=web", ResourceVersion: applied})
	require.NoError(t, err)
	defer watch.Stop()

	state := "backingOff"
	annotations := map[string]*string{"test/mirror": &state, "test/old": nil}
	res, err := e.applier.Restore(e.ctx, rsr, change, resources.Previous(change), []v1alpha1.ResourceName{v1alpha1.ResourceMemory}, annotations)
	require.NoError(t, err)
	assert.True(t, res.Annotated)
	got := e.reread(w.obj)
	assert.Equal(t, map[string]string{"test/mirror": "backingOff"}, got.GetAnnotations(), "set and removed")
	assertResources(t, requirements("750m", "256Mi", "1", "512Mi"), resourcesOf(&templateOf(got).Spec, "app"))
	var writes []string
	for len(writes) == 0 || writes[len(writes)-1] != got.GetResourceVersion() {
		select {
		case ev := <-watch.ResultChan():
			writes = append(writes, ev.Object.(*appsv1.Deployment).ResourceVersion)
		case <-time.After(10 * time.Second):
			t.Fatalf("the watch never saw the restore's write (saw %v)", writes)
		}
	}
	assert.Len(t, writes, 1, "the values and the annotations in one write")

	other := "monitoring"
	again, err := e.applier.Restore(e.ctx, rsr, change, resources.Previous(change), []v1alpha1.ResourceName{v1alpha1.ResourceMemory},
		map[string]*string{"test/mirror": &other})
	require.NoError(t, err)
	assert.False(t, again.Annotated, "the template held the values: no patch")
	assert.Equal(t, got.GetResourceVersion(), e.reread(w.obj).GetResourceVersion(), "nothing written")

	inPlace := e.createWorkload(v1alpha1.KindDeployment, "api", workloadOpts{})
	rsr = e.rsr(inPlace, v1alpha1.StrategyInPlace, values("app", "750m", "", "", "768Mi"))
	change = e.planAndApply(rsr)
	res, err = e.applier.Restore(e.ctx, rsr, change, resources.Previous(change), []v1alpha1.ResourceName{v1alpha1.ResourceMemory}, annotations)
	require.NoError(t, err)
	assert.False(t, res.Annotated, "an in-place restore patches no template")
	assert.NotContains(t, e.reread(inPlace.obj).GetAnnotations(), "test/mirror")
}
