package recommender_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	vpav1 "k8s.io/autoscaler/vertical-pod-autoscaler/pkg/apis/autoscaling.k8s.io/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/cluster/recommend"
	"github.com/kerf-dev/kerf/cluster/signals"
	"github.com/kerf-dev/kerf/internal/kube"
	"github.com/kerf-dev/kerf/test/controlplane"
	"github.com/kerf-dev/kerf/test/kubetest"
	"github.com/kerf-dev/kerf/test/leadertest"
)

// vpaModule is the module whose types and CRD the VPA source uses.
const vpaModule = "k8s.io/autoscaler/vertical-pod-autoscaler"

// vpaCRDFile is the VerticalPodAutoscaler CRD of the module go.mod pins,
// from the module cache (deploy/vpa-v1-crd-gen.yaml, the CRD VPA installs).
func vpaCRDFile(t *testing.T) string {
	t.Helper()
	root, err := kube.RepoRoot()
	require.NoError(t, err)
	gobin, err := exec.LookPath("go")
	require.NoError(t, err, "the go command finds the VPA module's CRD in the module cache")
	cmd := exec.Command(gobin, "list", "-m", "-f", "{{.Dir}}", vpaModule)
	cmd.Dir = root
	out, err := cmd.Output()
	require.NoError(t, err, "find %s in the module cache", vpaModule)
	dir := strings.TrimSpace(string(out))
	require.NotEmpty(t, dir, "%s is not in the module cache (go mod download)", vpaModule)
	return filepath.Join(dir, "deploy", "vpa-v1-crd-gen.yaml")
}

// vpaCRDs are the CRDs of the VPA module's file.
var vpaCRDs = []string{"verticalpodautoscalers.autoscaling.k8s.io", "verticalpodautoscalercheckpoints.autoscaling.k8s.io"}

// installVPACRD installs the VPA module's CRDs on the package's control
// plane unless they are there already. They stay: a test that needs them
// absent removes them (removeVPACRD).
func installVPACRD(t *testing.T) {
	t.Helper()
	cp := controlplane.Get(t)
	if vpaCRDEstablished(t) {
		return
	}
	waitVPACRDGone(t) // one being removed must be gone before it is made again
	_, err := envtest.InstallCRDs(cp.Config, envtest.CRDInstallOptions{Paths: []string{vpaCRDFile(t)}, ErrorIfPathMissing: true})
	require.NoError(t, err, "install the VPA CRD")
}

// removeVPACRD removes the VPA module's CRDs and waits until they are gone.
func removeVPACRD(t *testing.T) {
	t.Helper()
	require.NoError(t, envtest.UninstallCRDs(controlplane.Get(t).Config,
		envtest.CRDInstallOptions{Paths: []string{vpaCRDFile(t)}, ErrorIfPathMissing: true}))
	waitVPACRDGone(t)
}

// vpaCRD reads a CRD as unstructured (the scheme has no apiextensions).
func vpaCRD(t *testing.T, name string) (*unstructured.Unstructured, error) {
	t.Helper()
	crd := &unstructured.Unstructured{}
	crd.SetGroupVersionKind(schema.GroupVersionKind{Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinition"})
	return crd, controlplane.Get(t).Client.Get(context.Background(), client.ObjectKey{Name: name}, crd)
}

// vpaCRDEstablished reports whether both VPA CRDs exist, not being
// deleted.
func vpaCRDEstablished(t *testing.T) bool {
	t.Helper()
	for _, name := range vpaCRDs {
		crd, err := vpaCRD(t, name)
		if err != nil || crd.GetDeletionTimestamp() != nil {
			return false
		}
	}
	return true
}

// vpaCRDGoneWithin bounds waitVPACRDGone. The apiserver removes a
// deleted CRD once its finalizer has deleted every instance; under the
// whole package's load (make test) that once took over the 60 s this
// wait had, with no test running in parallel.
const vpaCRDGoneWithin = 3 * time.Minute

// waitVPACRDGone waits for both VPA CRDs to be absent; past
// vpaCRDGoneWithin it fails naming the one left, with its finalizers and
// conditions (what the apiserver still waits for).
//
// The apiserver's CRD finalizer lists the instances to delete them. Just
// after a CRD is made or changed that list can fail with "storage is
// (re)initializing" (InstanceDeletionFailed); the finalizer then retries
// on its workqueue's exponential backoff, which CI once saw pass three
// minutes (operator-framework/operator-controller#1437 reports the
// same). A changed annotation requeues the CRD at once, so the wait
// touches one every couple of seconds while the finalizer reports that
// failure.
func waitVPACRDGone(t *testing.T) {
	t.Helper()
	start := time.Now()
	var nudged time.Time
	for {
		left := ""
		for _, name := range vpaCRDs {
			crd, err := vpaCRD(t, name)
			if !apierrors.IsNotFound(err) {
				conditions, _, _ := unstructured.NestedSlice(crd.Object, "status", "conditions")
				left = fmt.Sprintf("%s (err %v, deleting since %v, finalizers %v, conditions %v)", name, err, crd.GetDeletionTimestamp(), crd.GetFinalizers(), conditions)
				if err == nil && instanceDeletionFailed(conditions) && time.Since(nudged) > 2*time.Second {
					nudgeCRD(t, crd)
					nudged = time.Now()
				}
				break
			}
		}
		if left == "" {
			if d := time.Since(start); d > 10*time.Second {
				t.Logf("the VerticalPodAutoscaler CRDs took %s to go", d.Round(time.Second))
			}
			return
		}
		if time.Since(start) > vpaCRDGoneWithin {
			t.Fatalf("the VerticalPodAutoscaler CRDs are still installed after %s: %s", vpaCRDGoneWithin, left)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// instanceDeletionFailed reports whether a CRD's conditions say its
// finalizer failed to delete the instances.
func instanceDeletionFailed(conditions []any) bool {
	for _, c := range conditions {
		m, _ := c.(map[string]any)
		if m["type"] == "Terminating" && m["reason"] == "InstanceDeletionFailed" {
			return true
		}
	}
	return false
}

// nudgeCRD changes an annotation of a terminating CRD, which the
// apiserver's CRD finalizer takes as a reason to try again now.
func nudgeCRD(t *testing.T, crd *unstructured.Unstructured) {
	t.Helper()
	patch := fmt.Appendf(nil, `{"metadata":{"annotations":{"kerf.dev/test-retry":%q}}}`, time.Now().Format(time.RFC3339Nano))
	err := controlplane.Get(t).Client.Patch(context.Background(), crd, client.RawPatch(types.MergePatchType, patch))
	if err != nil && !apierrors.IsNotFound(err) {
		t.Logf("nudge the CRD finalizer on %s: %v", crd.GetName(), err)
	}
}

// vpaPolicy is recommendingPolicy taking its targets from the VPA.
func vpaPolicy(ns string) *v1alpha1.RightsizingPolicy {
	p := kubetest.RecommendingPolicy(ns)
	p.Spec.Recommend.Source = v1alpha1.RecommendSourceVPA
	return p
}

// createVPA creates VPA name targeting Deployment web in mode; with cpu
// and mem set, it then writes the status a VPA recommender writes, with
// bounds at half and twice the target.
func createVPA(t *testing.T, c client.Client, ns, name string, mode vpav1.UpdateMode, cpu, mem string) {
	t.Helper()
	vpa := &vpav1.VerticalPodAutoscaler{
		TypeMeta:   metav1.TypeMeta{APIVersion: vpav1.SchemeGroupVersion.String(), Kind: "VerticalPodAutoscaler"},
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: vpav1.VerticalPodAutoscalerSpec{
			TargetRef:    &autoscalingv1.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "web"},
			UpdatePolicy: &vpav1.PodUpdatePolicy{UpdateMode: ptr.To(mode)},
		},
	}
	u := toUnstructured(t, vpa)
	require.NoError(t, c.Create(context.Background(), u))
	if cpu != "" {
		writeVPATarget(t, c, ns, name, cpu, mem)
	}
}

// writeVPATarget writes the VPA's status.recommendation for container
// app: target cpu and mem, lower bound half, upper bound twice.
func writeVPATarget(t *testing.T, c client.Client, ns, name, cpu, mem string) {
	t.Helper()
	ctx := context.Background()
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(vpav1.SchemeGroupVersion.WithKind("VerticalPodAutoscaler"))
	require.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, u))
	var vpa vpav1.VerticalPodAutoscaler
	require.NoError(t, k8sruntime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &vpa))
	scaled := func(s string, num, den int64) resource.Quantity {
		q := resource.MustParse(s)
		if q.Format == resource.DecimalSI && strings.HasSuffix(s, "m") {
			return *resource.NewMilliQuantity(q.MilliValue()*num/den, resource.DecimalSI)
		}
		return *resource.NewQuantity(q.Value()*num/den, resource.BinarySI)
	}
	vpa.Status.Recommendation = &vpav1.RecommendedPodResources{ContainerRecommendations: []vpav1.RecommendedContainerResources{{
		ContainerName: "app",
		Target:        corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(mem)},
		LowerBound:    corev1.ResourceList{corev1.ResourceCPU: scaled(cpu, 1, 2), corev1.ResourceMemory: scaled(mem, 1, 2)},
		UpperBound:    corev1.ResourceList{corev1.ResourceCPU: scaled(cpu, 2, 1), corev1.ResourceMemory: scaled(mem, 2, 1)},
	}}}
	vpa.Status.Conditions = []vpav1.VerticalPodAutoscalerCondition{{Type: vpav1.RecommendationProvided, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()}}
	require.NoError(t, c.Status().Update(ctx, toUnstructured(t, &vpa)), "write the VPA's status")
}

// toUnstructured converts a typed VPA, which the scheme does not know.
func toUnstructured(t *testing.T, vpa *vpav1.VerticalPodAutoscaler) *unstructured.Unstructured {
	t.Helper()
	obj, err := k8sruntime.DefaultUnstructuredConverter.ToUnstructured(vpa)
	require.NoError(t, err)
	u := &unstructured.Unstructured{Object: obj}
	u.SetGroupVersionKind(vpav1.SchemeGroupVersion.WithKind("VerticalPodAutoscaler"))
	return u
}

// vpaSkipped is kerf_recommender_vpa_skipped_total{reason} of the leader.
func vpaSkipped(t *testing.T, l *leadertest.Replica, reason string) float64 {
	t.Helper()
	mfs, err := l.Registry().Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != "kerf_recommender_vpa_skipped_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "reason" && lp.GetValue() == reason {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// vpaWeb creates the Deployment web (500m, 256Mi) under policy p, starts
// a leader whose recommender reads every 200 ms, runs an adopted pod and
// calls before (given the leader's stores and the pod) before usage
// readings of 50m and 40Mi come in.
func vpaWeb(t *testing.T, p *v1alpha1.RightsizingPolicy, before func(*signals.Stores, *corev1.Pod)) (client.Client, string, *leadertest.Replica) {
	t.Helper()
	c := controlplane.Get(t).Client
	return leadertest.RecommendedWebUnder(t, c, p.Namespace, p, before)
}

// waitVPARecommended waits for web's recommendation and returns it with
// its basis, checking the basis names the VPA.
func waitVPARecommended(t *testing.T, c client.Client, ns, vpaName string) (*v1alpha1.RightsizingRecommendation, v1alpha1.RecommendationBasis) {
	t.Helper()
	var rsr v1alpha1.RightsizingRecommendation
	require.Eventually(t, func() bool {
		return c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "web"}, &rsr) == nil
	}, 30*time.Second, 50*time.Millisecond, "the recommender made no recommendation from the VPA")
	assert.Equal(t, v1alpha1.RecommendedByKerf, rsr.Labels[v1alpha1.RecommendedByLabel])
	require.Len(t, rsr.Spec.Containers, 1)
	var basis v1alpha1.RecommendationBasis
	require.NoError(t, json.Unmarshal([]byte(rsr.Annotations[v1alpha1.RecommendationBasisAnnotation]), &basis))
	assert.Equal(t, v1alpha1.RecommendSourceVPA, basis.Source)
	assert.Equal(t, vpaName, basis.VPA)
	require.Len(t, basis.Containers, 1)
	return &rsr, basis
}

// TestRecommenderRunsWithoutTheVPACRD checks a cluster without the VPA
// CRD: the leader starts and leads, a workload whose policy says source
// VPA gets nothing (counted as NoCRD), and once the policy says source
// Kerf the recommender's own recommendation is written. It comes first
// in the file: a package run reaches it before any test installs the
// CRD, so it removes nothing (a CRD deleted a moment after it was made
// can stay Terminating for minutes; see waitVPACRDGone).
func TestRecommenderRunsWithoutTheVPACRD(t *testing.T) {
	removeVPACRD(t)
	ns := kubetest.Namespace(t, controlplane.Get(t).Client)
	c, _, l := vpaWeb(t, vpaPolicy(ns), nil)
	require.Eventually(t, func() bool { return vpaSkipped(t, l, "NoCRD") >= 2 }, 15*time.Second, 50*time.Millisecond,
		"source VPA without the CRD is not counted")
	assert.True(t, l.Leading(), "the leader leads without the VPA CRD")
	var none v1alpha1.RightsizingRecommendation
	assert.True(t, apierrors.IsNotFound(c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "web"}, &none)))

	var p v1alpha1.RightsizingPolicy
	require.NoError(t, c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: vpaPolicy(ns).Name}, &p))
	kubetest.Update(t, c, &p, func() { p.Spec.Recommend.Source = v1alpha1.RecommendSourceKerf })
	rsr, basis := kubetest.WaitRecommended(t, c, ns)
	assert.Equal(t, v1alpha1.RecommendSourceKerf, basis.Source)
	assert.Empty(t, basis.VPA)
	assert.Negative(t, rsr.Spec.Containers[0].Requests.CPU.Cmp(resource.MustParse("100m")), "Kerf's own target for 50m of use")
}

// TestRecommenderTakesTheTargetOfAVPAInOffMode checks the VPA source end
// to end: a Deployment whose policy says source VPA gets nothing while its
// VPA (updateMode Off, as Goldilocks makes them) has no recommendation,
// then the VPA's target once the status says one, with the VPA named in
// the basis and its bounds recorded.
func TestRecommenderTakesTheTargetOfAVPAInOffMode(t *testing.T) {
	installVPACRD(t)
	ns := kubetest.Namespace(t, controlplane.Get(t).Client)
	// Paused: the recommender writes nothing new to a recommendation
	// whose change is watched, and the test follows a second target.
	p := vpaPolicy(ns)
	p.Spec.Guardrails.Paused = true
	c, _, l := vpaWeb(t, p, func(_ *signals.Stores, pod *corev1.Pod) {
		createVPA(t, controlplane.Get(t).Client, pod.Namespace, "goldilocks-web", vpav1.UpdateModeOff, "", "")
	})
	require.Eventually(t, func() bool { return vpaSkipped(t, l, "NoRecommendation") >= 2 }, 15*time.Second, 50*time.Millisecond,
		"a VPA without a recommendation is not counted")
	var none v1alpha1.RightsizingRecommendation
	assert.True(t, apierrors.IsNotFound(c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "web"}, &none)),
		"nothing is written before the VPA recommends")

	writeVPATarget(t, c, ns, "goldilocks-web", "120m", "180Mi")
	rsr, basis := waitVPARecommended(t, c, ns, "goldilocks-web")
	got := rsr.Spec.Containers[0]
	assert.Equal(t, int64(120), got.Requests.CPU.MilliValue(), "the VPA's CPU target, not Kerf's own (50m of use)")
	assert.Equal(t, int64(180<<20), got.Requests.Memory.Value(), "the VPA's memory target")
	assert.Equal(t, int64(120), got.Limits.CPU.MilliValue(), "the manifest's limit = request is kept")
	assert.Equal(t, int64(180<<20), got.Limits.Memory.Value())
	assert.Equal(t, "Off", basis.VPAUpdateMode)
	cb := basis.Containers[0]
	assert.Equal(t, int64(120), cb.TargetCPUMilli)
	assert.Equal(t, int64(180<<20), cb.TargetMemoryBytes)
	require.NotNil(t, cb.Lower)
	require.NotNil(t, cb.Upper)
	assert.Equal(t, v1alpha1.BoundBasis{CPUMilli: 60, MemoryBytes: 90 << 20}, *cb.Lower, "the VPA's lower bound, as figures")
	assert.Equal(t, v1alpha1.BoundBasis{CPUMilli: 240, MemoryBytes: 360 << 20}, *cb.Upper, "the VPA's upper bound, as figures")
	assert.Empty(t, cb.Refusals)

	// A new target is followed.
	writeVPATarget(t, c, ns, "goldilocks-web", "300m", "200Mi")
	require.Eventually(t, func() bool {
		return kubetest.GetRSR(t, c, ns, "web").Spec.Containers[0].Requests.CPU.MilliValue() == 300
	}, 15*time.Second, 50*time.Millisecond, "the VPA's new target is not followed")
}

// TestRecommenderKeepsTheOOMLatchOverAVPA checks that the VPA's target
// goes through Kerf's latches: with an OOM kill in the kernel store,
// memory is not lowered to the VPA's 100Mi but held at
// max(peak+100Mi, peak×1.2) of the kill at the 256Mi limit, while CPU
// follows the VPA.
func TestRecommenderKeepsTheOOMLatchOverAVPA(t *testing.T) {
	installVPACRD(t)
	ns := kubetest.Namespace(t, controlplane.Get(t).Client)
	c, _, _ := vpaWeb(t, vpaPolicy(ns), func(sig *signals.Stores, pod *corev1.Pod) {
		createVPA(t, controlplane.Get(t).Client, pod.Namespace, "web", vpav1.UpdateModeOff, "150m", "100Mi")
		sig.Kernel.AddOOMKill(pod.UID, "app", time.Now().Add(-time.Minute))
	})
	rsr, basis := waitVPARecommended(t, c, ns, "web")
	got := rsr.Spec.Containers[0]
	assert.Equal(t, int64(150), got.Requests.CPU.MilliValue(), "CPU follows the VPA")
	assert.GreaterOrEqual(t, got.Requests.Memory.Value(), int64(356<<20), "memory request %s after an OOM kill, though the VPA says 100Mi", got.Requests.Memory)
	assert.GreaterOrEqual(t, got.Limits.Memory.Value(), got.Requests.Memory.Value())
	var oom *v1alpha1.RefusalBasis
	for i, f := range basis.Containers[0].Refusals {
		if recommend.Reason(f.Reason) == recommend.ReasonOOMKill && recommend.Resource(f.Resource) == recommend.Memory && recommend.Field(f.Field) == recommend.Request {
			oom = &basis.Containers[0].Refusals[i]
		}
	}
	require.NotNil(t, oom, "the OOM refusal is recorded: %+v", basis.Containers[0].Refusals)
	assert.Equal(t, int64(100<<20), oom.Asked, "what the VPA asked for")
	assert.GreaterOrEqual(t, oom.Held, int64(356<<20))
	assert.Equal(t, float64(256<<20), oom.Observed, "the peak at the kill")
}

// TestRecommenderRefusesAVPAThatChangesThePodsItself checks that Kerf
// does not fight a VPA in Auto mode: nothing is written and the refusal is
// counted; once the VPA is switched to Off its target is taken.
func TestRecommenderRefusesAVPAThatChangesThePodsItself(t *testing.T) {
	installVPACRD(t)
	ns := kubetest.Namespace(t, controlplane.Get(t).Client)
	c, _, l := vpaWeb(t, vpaPolicy(ns), func(_ *signals.Stores, pod *corev1.Pod) {
		// Auto, deprecated in v1.8.1 but what most VPAs in use say.
		createVPA(t, controlplane.Get(t).Client, pod.Namespace, "web", vpav1.UpdateMode("Auto"), "150m", "100Mi")
	})
	require.Eventually(t, func() bool { return vpaSkipped(t, l, "UpdateModeActive") >= 3 }, 15*time.Second, 50*time.Millisecond,
		"a VPA in Auto mode is not refused")
	var none v1alpha1.RightsizingRecommendation
	assert.True(t, apierrors.IsNotFound(c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "web"}, &none)),
		"nothing is written for a workload whose VPA is in Auto mode")

	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(vpav1.SchemeGroupVersion.WithKind("VerticalPodAutoscaler"))
	ctx := context.Background()
	require.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "web"}, u))
	require.NoError(t, unstructured.SetNestedField(u.Object, string(vpav1.UpdateModeOff), "spec", "updatePolicy", "updateMode"))
	require.NoError(t, c.Update(ctx, u))
	rsr, _ := waitVPARecommended(t, c, ns, "web")
	assert.Equal(t, int64(150), rsr.Spec.Containers[0].Requests.CPU.MilliValue())

	// A second VPA naming the same workload: Kerf takes neither.
	createVPA(t, c, ns, "web-2", vpav1.UpdateModeOff, "400m", "300Mi")
	require.Eventually(t, func() bool { return vpaSkipped(t, l, "MultipleVPAs") >= 2 }, 15*time.Second, 50*time.Millisecond,
		"two VPAs for one workload are not refused")
	assert.Equal(t, int64(150), kubetest.GetRSR(t, c, ns, "web").Spec.Containers[0].Requests.CPU.MilliValue(), "the recommendation is left as it was")
}
