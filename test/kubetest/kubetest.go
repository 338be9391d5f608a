// Package kubetest makes the Kubernetes objects the leader's tests work
// on, and waits on what the leader records about them.
//
// It holds workloads and their pods as a kubelet reports them,
// recommendations and policies, and the waits on a recommendation's
// phase, history and Events. It starts no leader (test/leadertest does),
// so the internal tests of the leader's packages can use it too.
package kubetest

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/cluster/cert"
	"github.com/kerf-dev/kerf/cluster/signals"
	"github.com/kerf-dev/kerf/test/controlplane"
)

// Namespace creates a fresh namespace for one test.
func Namespace(t testing.TB, c client.Client) string {
	t.Helper()
	return controlplane.Namespace(t, c, "kerf-leader-test-")
}

// Deployment is a one-replica Deployment whose one container app asks
// for cpu and mem (requests equal to limits).
func Deployment(ns, name string, cpu, mem string) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{
					Name: "app", Image: "kerf.local/kerf-workload:dev",
					Resources: corev1.ResourceRequirements{
						Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(mem)},
						Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(mem)},
					},
				}}},
			},
		},
	}
}

// Q parses a quantity.
func Q(s string) *resource.Quantity { v := resource.MustParse(s); return &v }

// Recommendation asks for cpu and mem (requests equal to limits) for
// container app of Deployment target, with strategy.
func Recommendation(ns, name, target string, strategy v1alpha1.Strategy, cpu, mem string) *v1alpha1.RightsizingRecommendation {
	return &v1alpha1.RightsizingRecommendation{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1alpha1.RightsizingRecommendationSpec{
			TargetRef: v1alpha1.TargetRef{APIVersion: "apps/v1", Kind: v1alpha1.KindDeployment, Name: target},
			Strategy:  strategy,
			Containers: []v1alpha1.ContainerResources{{
				Name:     "app",
				Requests: &v1alpha1.ResourceValues{CPU: Q(cpu), Memory: Q(mem)},
				Limits:   &v1alpha1.ResourceValues{CPU: Q(cpu), Memory: Q(mem)},
			}},
		},
	}
}

// NamespacedPolicy is a RightsizingPolicy selecting every workload in ns.
func NamespacedPolicy(ns string, paused bool) *v1alpha1.RightsizingPolicy {
	p := &v1alpha1.RightsizingPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "guard"}}
	p.Spec.Guardrails.Paused = paused
	return p
}

// GetRSR reads recommendation ns/name.
func GetRSR(t testing.TB, c client.Client, ns, name string) *v1alpha1.RightsizingRecommendation {
	t.Helper()
	var rsr v1alpha1.RightsizingRecommendation
	require.NoError(t, c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &rsr))
	return &rsr
}

// WaitRSR reads recommendation ns/name every 50 ms until done holds for
// it, and returns it; after 30 s the test fails with msgAndArgs.
func WaitRSR(t testing.TB, c client.Client, ns, name string, done func(*v1alpha1.RightsizingRecommendation) bool, msgAndArgs ...any) *v1alpha1.RightsizingRecommendation {
	t.Helper()
	var rsr *v1alpha1.RightsizingRecommendation
	require.Eventually(t, func() bool {
		rsr = GetRSR(t, c, ns, name)
		return done(rsr)
	}, 30*time.Second, 50*time.Millisecond, msgAndArgs...)
	return rsr
}

// WaitPhase waits until the recommendation has phase and, unless empty,
// reason, and returns it.
func WaitPhase(t testing.TB, c client.Client, ns, name string, phase v1alpha1.Phase, reason string) *v1alpha1.RightsizingRecommendation {
	t.Helper()
	return WaitRSR(t, c, ns, name, func(rsr *v1alpha1.RightsizingRecommendation) bool {
		return rsr.Status.Phase == phase && (reason == "" || rsr.Status.Reason == reason)
	}, "phase %s/%s never reached", phase, reason)
}

// WaitApplied waits until the change was applied: the Applied condition is
// true (the phase is Applied, or already Watching).
func WaitApplied(t *testing.T, c client.Client, ns, name string) *v1alpha1.RightsizingRecommendation {
	t.Helper()
	return WaitRSR(t, c, ns, name, func(rsr *v1alpha1.RightsizingRecommendation) bool {
		cond := Condition(rsr, v1alpha1.ConditionApplied)
		return cond != nil && cond.Status == metav1.ConditionTrue &&
			(rsr.Status.Phase == v1alpha1.PhaseApplied || rsr.Status.Phase == v1alpha1.PhaseWatching)
	}, "the change was never applied")
}

// EventsFor lists the Events in ns about objects named name with reason,
// and fails the test for one of them whose type (Normal or Warning) is
// not typ: an Event's type is part of what users see.
func EventsFor(t *testing.T, c client.Client, ns, name, typ, reason string) []eventsv1.Event {
	t.Helper()
	var list eventsv1.EventList
	require.NoError(t, c.List(context.Background(), &list, client.InNamespace(ns)))
	var out []eventsv1.Event
	for _, e := range list.Items {
		if e.Regarding.Name == name && e.Reason == reason {
			out = append(out, e)
		}
	}
	for _, e := range out {
		assert.Equal(t, typ, e.Type, "type of the %s Event about %s: %s", reason, name, e.Note)
	}
	return out
}

// HistoryOf is the recommendation's history entries of type typ.
func HistoryOf(rsr *v1alpha1.RightsizingRecommendation, typ v1alpha1.ActionType) []v1alpha1.Action {
	var out []v1alpha1.Action
	for _, a := range rsr.Status.History {
		if a.Type == typ {
			out = append(out, a)
		}
	}
	return out
}

// RunningPod creates the Deployment's current ReplicaSet and one Running
// pod of it, as the controller-manager and a kubelet would (none runs in
// these tests), and returns the pod.
func RunningPod(t *testing.T, c client.Client, dep *appsv1.Deployment) *corev1.Pod {
	t.Helper()
	return RunningPodsOn(t, c, dep, Node(t, c), "x")[0]
}

// RunningPodsOn creates the Deployment's current ReplicaSet and a Running
// pod of it on node per suffix, named <deployment>-h1-<suffix>, as
// RunningPod does.
func RunningPodsOn(t *testing.T, c client.Client, dep *appsv1.Deployment, node string, suffixes ...string) []*corev1.Pod {
	t.Helper()
	ctx := context.Background()
	labels := map[string]string{"app": dep.Name, "pod-template-hash": "h1"}
	tmpl := *dep.Spec.Template.DeepCopy()
	tmpl.Labels = labels
	rs := &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: dep.Namespace, Name: dep.Name + "-h1", Labels: labels,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(dep, appsv1.SchemeGroupVersion.WithKind("Deployment"))}},
		Spec: appsv1.ReplicaSetSpec{Replicas: ptr.To(int32(len(suffixes))), Selector: &metav1.LabelSelector{MatchLabels: labels}, Template: tmpl},
	}
	require.NoError(t, c.Create(ctx, rs))
	pods := make([]*corev1.Pod, 0, len(suffixes))
	for _, s := range suffixes {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: dep.Namespace, Name: dep.Name + "-h1-" + s, Labels: labels,
				OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(rs, appsv1.SchemeGroupVersion.WithKind("ReplicaSet"))}},
			Spec: *tmpl.Spec.DeepCopy(),
		}
		pod.Spec.NodeName = node
		require.NoError(t, c.Create(ctx, pod))
		MarkRunning(t, c, pod)
		pods = append(pods, pod)
	}
	return pods
}

// Node makes sure the Node the test pods run on exists, with room for
// them: the apiserver checks a resize against the node's allocatable, and
// the leader's NodeHeadroom gate against what its pods request. Every test
// of a package places its pods on it, so its room holds them all. It
// declares the in-place resize of pod-level resources, as a 1.37 kubelet
// does: the apiserver refuses that resize on a node that does not.
func Node(t testing.TB, c client.Client) string {
	t.Helper()
	ctx := context.Background()
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}}
	if err := c.Create(ctx, n); err != nil {
		require.True(t, apierrors.IsAlreadyExists(err), "create node: %v", err)
		return n.Name
	}
	room := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1000"), corev1.ResourceMemory: resource.MustParse("4Ti"), corev1.ResourcePods: resource.MustParse("10000")}
	n.Status = corev1.NodeStatus{Capacity: room, Allocatable: room, DeclaredFeatures: []string{"InPlacePodLevelResourcesVerticalScaling"}}
	require.NoError(t, c.Status().Update(ctx, n))
	return n.Name
}

// KubeletReports writes what a kubelet would after a resize: either the
// values it now runs, or a PodResizePending condition with reason.
func KubeletReports(t *testing.T, c client.Client, pod *corev1.Pod, pendingReason string) {
	t.Helper()
	ctx := context.Background()
	t.Cleanup(func() {
		if t.Failed() {
			var l v1alpha1.RightsizingRecommendationList
			_ = c.List(ctx, &l, client.InNamespace(pod.Namespace))
			for _, r := range l.Items {
				t.Logf("recommendation %s: %s %s: %s", r.Name, r.Status.Phase, r.Status.Reason, r.Status.Message)
			}
		}
	})
	require.Eventually(t, func() bool {
		require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(pod), pod))
		return pod.Generation > 1 // the resize reached the pod
	}, 20*time.Second, 50*time.Millisecond, "the pod was never resized")
	pod.Status.ObservedGeneration = pod.Generation
	if pendingReason != "" {
		pod.Status.Conditions = append(pod.Status.Conditions, corev1.PodCondition{
			Type: corev1.PodResizePending, Status: corev1.ConditionTrue, Reason: pendingReason,
			Message: "Node didn't have enough capacity: cpu, requested: 64000, capacity: 2000", ObservedGeneration: pod.Generation,
			LastTransitionTime: metav1.Now(),
		})
	} else {
		pod.Status.ContainerStatuses[0].Resources = pod.Spec.Containers[0].Resources.DeepCopy()
		pod.Status.Resources = pod.Spec.Resources.DeepCopy()
	}
	require.NoError(t, c.Status().Update(ctx, pod))
}

// Counts waits until counter reads want: the leader counts an action just
// after the status update that records it.
func Counts(t *testing.T, counter prometheus.Counter, want float64) {
	t.Helper()
	require.Eventually(t, func() bool { return testutil.ToFloat64(counter) == want }, 10*time.Second, 20*time.Millisecond,
		"the counter reads %v, want %v", testutil.ToFloat64(counter), want)
}

// Update reads obj, applies mutate and writes it back, again on a conflict
// (the leader writes the status of the same objects meanwhile).
func Update(t *testing.T, c client.Client, obj client.Object, mutate func()) {
	t.Helper()
	require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := c.Get(context.Background(), client.ObjectKeyFromObject(obj), obj); err != nil {
			return err
		}
		mutate()
		return c.Update(context.Background(), obj)
	}))
}

// PolicyWith is a namespaced policy with a short watch, for tests that
// run the watch to its end in real time.
func PolicyWith(ns string, watchFor time.Duration, mutate func(*v1alpha1.RollbackGuardrails)) *v1alpha1.RightsizingPolicy {
	p := NamespacedPolicy(ns, false)
	p.Spec.Guardrails.Rollback.WatchDuration = &metav1.Duration{Duration: watchFor}
	if mutate != nil {
		mutate(&p.Spec.Guardrails.Rollback)
	}
	return p
}

// AdoptedPod creates a Running pod of the Deployment's new template, owned
// by a ReplicaSet of that template (as the controller-manager would after a
// Rollout; none runs here) and returns it.
func AdoptedPod(t testing.TB, c client.Client, dep *appsv1.Deployment, name string) *corev1.Pod {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(dep), dep))
	rs := &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: dep.Namespace, Name: fmt.Sprintf("%s-g%d", dep.Name, dep.Generation), Labels: dep.Spec.Template.Labels,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(dep, appsv1.SchemeGroupVersion.WithKind("Deployment"))}},
		Spec: appsv1.ReplicaSetSpec{Replicas: ptr.To[int32](1), Selector: dep.Spec.Selector, Template: *dep.Spec.Template.DeepCopy()},
	}
	if err := c.Create(ctx, rs); apierrors.IsAlreadyExists(err) {
		require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(rs), rs))
	} else {
		require.NoError(t, err)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: dep.Namespace, Name: name, Labels: dep.Spec.Template.Labels,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(rs, appsv1.SchemeGroupVersion.WithKind("ReplicaSet"))}},
		Spec: *dep.Spec.Template.Spec.DeepCopy(),
	}
	pod.Spec.NodeName = Node(t, c)
	require.NoError(t, c.Create(ctx, pod))
	MarkRunning(t, c, pod)
	return pod
}

// OOMKilled writes what a kubelet reports after the container was
// OOM-killed and restarted. Status times have one-second resolution and a
// termination counts when it finished after appliedAt, so it waits for the
// next second first.
func OOMKilled(t *testing.T, c client.Client, pod *corev1.Pod, reason string) {
	t.Helper()
	ctx := context.Background()
	time.Sleep(time.Until(time.Now().Truncate(time.Second).Add(time.Second)))
	require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(pod), pod))
	cs := &pod.Status.ContainerStatuses[0]
	cs.RestartCount++
	cs.LastTerminationState = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
		ExitCode: 137, Reason: reason, StartedAt: metav1.NewTime(time.Now().Add(-time.Second)), FinishedAt: metav1.Now()}}
	require.NoError(t, c.Status().Update(ctx, pod))
}

// Web creates the Deployment web (500m, 256Mi) and policy p in ns, and
// returns the Deployment.
func Web(t testing.TB, c client.Client, ns string, p *v1alpha1.RightsizingPolicy) *appsv1.Deployment {
	t.Helper()
	dep := Deployment(ns, "web", "500m", "256Mi")
	require.NoError(t, c.Create(context.Background(), dep))
	require.NoError(t, c.Create(context.Background(), p))
	return dep
}

// TemplateResources reads the Deployment and returns the resources of its
// pod template's one container.
func TemplateResources(t *testing.T, c client.Client, dep *appsv1.Deployment) *corev1.ResourceRequirements {
	t.Helper()
	var got appsv1.Deployment
	require.NoError(t, c.Get(context.Background(), client.ObjectKeyFromObject(dep), &got))
	return &got.Spec.Template.Spec.Containers[0].Resources
}

// Condition returns the recommendation's condition of type typ, or nil.
func Condition(rsr *v1alpha1.RightsizingRecommendation, typ string) *metav1.Condition {
	for i := range rsr.Status.Conditions {
		if rsr.Status.Conditions[i].Type == typ {
			return &rsr.Status.Conditions[i]
		}
	}
	return nil
}

// MarkRunning writes the status a kubelet reports for a pod whose one
// container app runs, with the resources of the pod's spec, pod-level ones
// included.
func MarkRunning(t testing.TB, c client.Client, pod *corev1.Pod) {
	t.Helper()
	pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, ObservedGeneration: pod.Generation, Resources: pod.Spec.Resources.DeepCopy(),
		ContainerStatuses: []corev1.ContainerStatus{{Name: "app", Ready: true, Resources: pod.Spec.Containers[0].Resources.DeepCopy(),
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Now()}}}}}
	require.NoError(t, c.Status().Update(context.Background(), pod))
}

// WaitRestored waits until the recommendation's breach is restored, and
// returns it.
func WaitRestored(t testing.TB, c client.Client, ns, name string) *v1alpha1.RightsizingRecommendation {
	t.Helper()
	return WaitRSR(t, c, ns, name, func(rsr *v1alpha1.RightsizingRecommendation) bool {
		return rsr.Status.Breach != nil && rsr.Status.Breach.Restored
	}, "the breach was never restored")
}

// WaitEvents waits until n Events with reason, all of type typ, are about
// objects named name, and returns them.
func WaitEvents(t *testing.T, c client.Client, ns, name, typ, reason string, n int) []eventsv1.Event {
	t.Helper()
	var evs []eventsv1.Event
	require.Eventually(t, func() bool {
		evs = EventsFor(t, c, ns, name, typ, reason)
		return len(evs) == n
	}, 10*time.Second, 50*time.Millisecond, "want %d %s events about %s", n, reason, name)
	return evs
}

// StreamCert gives the agents' stream a self-managed certificate for
// 127.0.0.1 in ns: the server's certificate source, and a pool with the CA
// that signs it for the agents.
func StreamCert(t *testing.T, c client.Client, ns string) (cert.Source, *x509.CertPool) {
	t.Helper()
	opts := cert.Options{Namespace: ns, ServiceName: "kerf-leader", SecretName: "kerf-stream-cert", ExtraHosts: []string{"127.0.0.1"}}
	_, _, caPEM, err := cert.EnsureSelfManaged(context.Background(), c, opts)
	require.NoError(t, err)
	pool := x509.NewCertPool()
	require.True(t, pool.AppendCertsFromPEM(caPEM))
	return cert.Source{SelfManaged: opts}, pool
}

// WaitFor polls cond every 20 ms until it holds or timeout passes.
func WaitFor(t testing.TB, timeout time.Duration, cond func() bool, msg string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal(msg)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// recommendingPolicy is a namespaced policy that enables the recommender
// with a history of 1 s, a new recommendation every second and a 1 %
// minimum change (the pod minimum of memory, 250Mi, is only 2 % under the
// Deployment's 256Mi).
func RecommendingPolicy(ns string) *v1alpha1.RightsizingPolicy {
	p := NamespacedPolicy(ns, false)
	p.Spec.Recommend = &v1alpha1.RecommendSpec{Enabled: true, Interval: &metav1.Duration{Duration: time.Second},
		MinHistory: &metav1.Duration{Duration: time.Second}, MinChangePercent: ptr.To[int32](1)}
	return p
}

// WaitRecommended waits for the recommendation the recommender makes for
// web and returns it with its basis.
func WaitRecommended(t *testing.T, c client.Client, ns string) (*v1alpha1.RightsizingRecommendation, v1alpha1.RecommendationBasis) {
	t.Helper()
	var rsr v1alpha1.RightsizingRecommendation
	require.Eventually(t, func() bool {
		return c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "web"}, &rsr) == nil
	}, 30*time.Second, 50*time.Millisecond, "the recommender made no recommendation")
	assert.Equal(t, v1alpha1.RecommendedByKerf, rsr.Labels[v1alpha1.RecommendedByLabel], "the recommendation says who made it")
	assert.Equal(t, v1alpha1.TargetRef{APIVersion: "apps/v1", Kind: v1alpha1.KindDeployment, Name: "web"}, rsr.Spec.TargetRef)
	assert.Equal(t, v1alpha1.StrategyInPlace, rsr.Spec.Strategy)
	require.Len(t, rsr.Spec.Containers, 1)
	require.Equal(t, "app", rsr.Spec.Containers[0].Name)
	var basis v1alpha1.RecommendationBasis
	require.NoError(t, json.Unmarshal([]byte(rsr.Annotations[v1alpha1.RecommendationBasisAnnotation]), &basis), "the figures it was made from")
	require.Len(t, basis.Containers, 1)
	assert.Equal(t, uint32(3), basis.Containers[0].Samples, "three CPU rates from four readings")
	assert.Equal(t, 0.9, basis.CPUPercentile)
	return &rsr, basis
}

// KernelOnly returns the leader's signal stores around a test's Kernel.
func KernelOnly(k *signals.Kernel) *signals.Stores {
	return &signals.Stores{Kernel: k, Statuses: signals.NewAgentStatuses(0)}
}
