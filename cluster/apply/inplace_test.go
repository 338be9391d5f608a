package apply_test

import (
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/kerf-dev/kerf/api/v1alpha1"
)

func resizeCondition(typ corev1.PodConditionType, reason, msg string, since time.Time) corev1.PodCondition {
	return corev1.PodCondition{Type: typ, Status: corev1.ConditionTrue, Reason: reason, Message: msg, LastTransitionTime: metav1.NewTime(since)}
}

func TestInPlaceResizeReportsTheKubeletsVerdict(t *testing.T) {
	const infeasible = "Node didn't have enough capacity: cpu, requested: 8000, capacity: 4000"
	cases := []struct {
		name    string
		timeout time.Duration // Applier.ResizeTimeout; 0 is the 2m default
		status  func(p *corev1.Pod)
		at      time.Duration // the clock, after the change's appliedAt
		pending bool
		reason  string // the Failure's reason; "" for none
		// infeasible: the pod is in Result.Infeasible, left to the health
		// watch, not in Failed.
		infeasible bool
	}{
		{
			name:       "Infeasible ends the apply at once and is left to the health watch",
			status:     conditions(resizeCondition(corev1.PodResizePending, corev1.PodReasonInfeasible, infeasible, t0)),
			infeasible: true,
		},
		{
			name:    "Deferred for less than the timeout is pending",
			status:  conditions(resizeCondition(corev1.PodResizePending, corev1.PodReasonDeferred, "not enough room now", t0)),
			at:      time.Minute + 59*time.Second,
			pending: true,
		},
		{
			name:   "Deferred for the timeout fails",
			status: conditions(resizeCondition(corev1.PodResizePending, corev1.PodReasonDeferred, "not enough room now", t0)),
			at:     2 * time.Minute,
			reason: v1alpha1.ResizeDeferred,
		},
		{
			name:    "Deferred counts from the resize, not from an older condition",
			status:  conditions(resizeCondition(corev1.PodResizePending, corev1.PodReasonDeferred, "", t0.Add(-time.Hour))),
			at:      time.Minute,
			pending: true,
		},
		{
			name:    "a shorter timeout is honoured",
			timeout: 30 * time.Second,
			status:  conditions(resizeCondition(corev1.PodResizePending, corev1.PodReasonDeferred, "", t0)),
			at:      30 * time.Second,
			reason:  v1alpha1.ResizeDeferred,
		},
		{
			name:    "InProgress for less than the timeout is pending",
			status:  conditions(resizeCondition(corev1.PodResizeInProgress, "", "", t0.Add(time.Second))),
			at:      2 * time.Minute,
			pending: true,
		},
		{
			name:   "InProgress past the timeout fails",
			status: conditions(resizeCondition(corev1.PodResizeInProgress, corev1.PodReasonError, "runtime refused cpu.max", t0)),
			at:     5 * time.Minute,
			reason: v1alpha1.ResizeInProgress,
		},
		{
			name: "a condition about an older generation is not this resize's",
			status: func(p *corev1.Pod) {
				c := resizeCondition(corev1.PodResizePending, corev1.PodReasonInfeasible, infeasible, t0)
				c.ObservedGeneration = p.Generation - 1
				p.Status.Conditions = append(p.Status.Conditions, c)
				p.Status.ObservedGeneration = p.Generation - 1
			},
			at:      time.Hour,
			pending: true,
		},
		{
			name: "status still reporting the old values is pending",
			status: func(p *corev1.Pod) {
				for i := range p.Status.ContainerStatuses {
					p.Status.ContainerStatuses[i].Resources = appBefore.DeepCopy()
				}
			},
			at:      time.Hour,
			pending: true,
		},
		{
			name:   "actuated is neither pending nor failed",
			status: func(*corev1.Pod) {},
			at:     time.Hour,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			e.applier.ResizeTimeout = tc.timeout
			w := e.createWorkload(v1alpha1.KindDeployment, "web", workloadOpts{pods: 1})
			rsr := e.rsr(w, v1alpha1.StrategyInPlace, values("app", "750m", "", "", "768Mi"))
			change := e.planAndApply(rsr)

			name := w.pods[0].Name
			e.kubeletStatus(name, tc.status)
			e.clock.Set(t0.Add(tc.at))
			rvBefore := e.pod(name).ResourceVersion
			res, err := e.applier.Apply(e.ctx, rsr, change)
			require.NoError(t, err)

			assert.Equal(t, rvBefore, e.pod(name).ResourceVersion, "the pod already runs the values: not resized again")
			assert.Equal(t, []string{"Pod/" + name}, touchedNames(res), "the pod's spec carries the values")
			if tc.pending {
				assert.Equal(t, []string{name}, res.Pending)
			} else {
				assert.Empty(t, res.Pending)
			}
			if tc.infeasible {
				require.Len(t, res.Infeasible, 1)
				assert.Equal(t, name, res.Infeasible[0].Pod)
				assert.Equal(t, v1alpha1.ResizeInfeasible, res.Infeasible[0].Reason)
				assert.Equal(t, infeasible, res.Infeasible[0].Message, "the kubelet's message")
			} else {
				assert.Empty(t, res.Infeasible)
			}
			if tc.reason == "" {
				assert.Empty(t, res.Failed)
				return
			}
			require.Len(t, res.Failed, 1)
			assert.Equal(t, name, res.Failed[0].Pod)
			assert.Equal(t, tc.reason, res.Failed[0].Reason)
			assert.Contains(t, res.Failed[0].Message, "timeout")
		})
	}
}

// conditions returns a status change that adds resize conditions.
func conditions(conds ...corev1.PodCondition) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		for _, c := range conds {
			c.ObservedGeneration = p.Generation
			p.Status.Conditions = append(p.Status.Conditions, c)
		}
	}
}

func TestInPlaceResizeRefusedByTheAPIServerIsAFailure(t *testing.T) {
	cases := []struct {
		name    string
		applied v1alpha1.ContainerResources
		message string
	}{
		// Plan refuses a QoS change; a change recorded by hand reaches the
		// apiserver, which refuses it too.
		{"QoS class change", values("app", "1", "512Mi", "", ""), "QOS"},
		// The PodResizeValidator admission plugin checks the node's allocatable.
		{"above the node's allocatable", values("app", "5", "", "6", ""), "allocatable"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			w := e.createWorkload(v1alpha1.KindDeployment, "web", workloadOpts{pods: 1, containers: []corev1.Container{appContainer()}})
			rsr := e.rsr(w, v1alpha1.StrategyInPlace, tc.applied)
			change := &v1alpha1.Change{AppliedAt: metav1.NewTime(t0), Strategy: v1alpha1.StrategyInPlace,
				Containers: []v1alpha1.ContainerChange{{Name: "app", Applied: v1alpha1.Resources{Requests: tc.applied.Requests, Limits: tc.applied.Limits}}}}
			res, err := e.applier.Apply(e.ctx, rsr, change)
			require.NoError(t, err, "a refused resize is a per-pod failure, not an error")
			require.Len(t, res.Failed, 1)
			assert.Equal(t, v1alpha1.ResizeRejected, res.Failed[0].Reason)
			assert.Contains(t, res.Failed[0].Message, tc.message)
			assert.Empty(t, res.Touched, "the pod does not carry the values")
			assertResources(t, appBefore, resourcesOf(&e.pod(w.pods[0].Name).Spec, "app"))
		})
	}
}

func TestInPlaceResizesOnlyTheRunningPodsOfTheCurrentReplicaSet(t *testing.T) {
	e := newEnv(t)
	w := e.createWorkload(v1alpha1.KindDeployment, "web", workloadOpts{})
	current := w.owner
	notRunning := e.createPod(current, "web-starting", false)
	deleting := e.createPod(current, "web-deleting", true)
	require.NoError(t, e.cp.Client.Delete(e.ctx, deleting)) // bound to a node: it waits for the kubelet
	require.NotNil(t, e.pod(deleting.Name).DeletionTimestamp)

	// An older ReplicaSet of the same Deployment, with a running pod.
	old := e.reread(w.obj).(*appsv1.Deployment)
	old.Spec.Template.Spec.Containers[0].Image = "kerf.local/kerf-workload:0"
	oldRS := e.createReplicaSet(old, "7c6b5d4f3", "0")
	oldPod := e.createPod(oldRS, "web-old", true)
	// A pod that matches the labels but no controller owns.
	stray := e.createPod(current, "web-stray", true)
	stray.OwnerReferences = nil
	require.NoError(t, e.cp.Client.Update(e.ctx, stray))

	rsr := e.rsr(w, v1alpha1.StrategyInPlace, values("app", "750m", "", "", "768Mi"))
	change, err := e.plan(rsr)
	require.NoError(t, err)
	res, err := e.applier.Apply(e.ctx, rsr, change)
	require.NoError(t, err)

	assert.Equal(t, []string{"Pod/web-0", "Pod/web-1"}, touchedNames(res))
	for _, p := range w.pods {
		assertResources(t, appAfter, resourcesOf(&e.pod(p.Name).Spec, "app"), p.Name)
	}
	for _, name := range []string{notRunning.Name, deleting.Name, oldPod.Name, stray.Name} {
		assertResources(t, appBefore, resourcesOf(&e.pod(name).Spec, "app"), "%s is left alone", name)
	}
}

func TestInPlaceResizesContainersWithRestartContainerPolicyAndNotesIt(t *testing.T) {
	e := newEnv(t)
	app := appContainer()
	app.ResizePolicy = []corev1.ContainerResizePolicy{
		{ResourceName: corev1.ResourceCPU, RestartPolicy: corev1.NotRequired},
		{ResourceName: corev1.ResourceMemory, RestartPolicy: corev1.RestartContainer},
	}
	w := e.createWorkload(v1alpha1.KindStatefulSet, "db", workloadOpts{pods: 1, containers: []corev1.Container{app}})
	rsr := e.rsr(w, v1alpha1.StrategyInPlace, values("app", "750m", "", "", "768Mi"))
	change, err := e.plan(rsr)
	require.NoError(t, err)
	res, err := e.applier.Apply(e.ctx, rsr, change)
	require.NoError(t, err)

	assertResources(t, appAfter, resourcesOf(&e.pod("db-0").Spec, "app"), "resized all the same")
	assert.Equal(t, []string{"pod db-0 container app restarts to resize memory (resizePolicy RestartContainer)"}, res.Notes)
}

// roundTripper is an http.RoundTripper made of a function.
type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func TestInPlaceResizeRetriesAConflictWithAFreshRead(t *testing.T) {
	e := newEnv(t)
	w := e.createWorkload(v1alpha1.KindDeployment, "web", workloadOpts{pods: 1})
	name := w.pods[0].Name

	// The kubelet writes the pod's status between Kerf's read and its resize.
	var raced atomic.Bool
	var resizes atomic.Int32
	cfg := rest.CopyConfig(e.cp.Config)
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		return roundTripper(func(r *http.Request) (*http.Response, error) {
			isResize := r.Method == http.MethodPut && strings.HasSuffix(r.URL.Path, "/pods/"+name+"/resize")
			if isResize {
				resizes.Add(1)
			}
			if isResize && raced.CompareAndSwap(false, true) {
				e.kubeletStatus(name, func(p *corev1.Pod) {
					p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: "example.com/Seen", Status: corev1.ConditionTrue})
				})
			}
			return rt.RoundTrip(r)
		})
	}
	cs, err := kubernetes.NewForConfig(cfg)
	require.NoError(t, err)
	e.applier.Clientset = cs

	rsr := e.rsr(w, v1alpha1.StrategyInPlace, values("app", "750m", "", "", "768Mi"))
	change, err := e.plan(rsr)
	require.NoError(t, err)
	res, err := e.applier.Apply(e.ctx, rsr, change)
	require.NoError(t, err)
	require.True(t, raced.Load(), "the race happened")
	assert.Equal(t, int32(2), resizes.Load(), "the first resize met a conflict, the second went through")

	got := e.pod(name)
	assertResources(t, appAfter, resourcesOf(&got.Spec, "app"), "resized on the second try")
	assert.Equal(t, []string{"Pod/" + name}, touchedNames(res))
	assert.Equal(t, got.ResourceVersion, res.Touched[0].ResourceVersion)
	var seen bool
	for _, c := range got.Status.Conditions {
		seen = seen || c.Type == "example.com/Seen"
	}
	assert.True(t, seen, "the kubelet's write is kept")
}
