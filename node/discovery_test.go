package node

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/cgroup"
	"github.com/kerf-dev/kerf/node/report"
	"github.com/kerf-dev/kerf/test/controlplane"
)

const testContainerID = "containerd://0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

func podOn(node, name string, uid types.UID, running bool) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: uid},
		Spec:       corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "app", Image: "kerf.local/kerf-workload:dev"}}},
		Status:     corev1.PodStatus{Phase: corev1.PodRunning, QOSClass: corev1.PodQOSBurstable},
	}
	cs := corev1.ContainerStatus{Name: "app"}
	if running {
		cs.ContainerID = testContainerID
		cs.State.Running = &corev1.ContainerStateRunning{StartedAt: metav1.Now()}
	}
	p.Status.ContainerStatuses = []corev1.ContainerStatus{cs}
	return p
}

func TestContainersNamesCgroupsOfRunningContainers(t *testing.T) {
	layout := cgroup.Layout{Driver: cgroup.DriverCgroupfs}
	pods := []*corev1.Pod{
		podOn("n1", "web", "6f1c9e2a-3b4d-4e5f-8a9b-0c1d2e3f4a5b", true),
		podOn("n1", "starting", "7f1c9e2a-3b4d-4e5f-8a9b-0c1d2e3f4a5b", false),
	}
	cs, err := Containers(pods, layout)
	require.NoError(t, err)
	require.Len(t, cs, 1, "a container that has not started has no cgroup yet")
	assert.Equal(t, "/kubepods/burstable/pod6f1c9e2a-3b4d-4e5f-8a9b-0c1d2e3f4a5b/0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", cs[0].CgroupPath)
	assert.Equal(t, report.ContainerKey{PodUID: "6f1c9e2a-3b4d-4e5f-8a9b-0c1d2e3f4a5b", Name: "app"}, cs[0].Key())

	bad := podOn("n1", "odd", "6f1c9e2a-3b4d-4e5f-8a9b-0c1d2e3f4a5b", true)
	bad.Status.ContainerStatuses[0].ContainerID = "rkt://abc"
	cs, err = Containers([]*corev1.Pod{bad}, layout)
	assert.Empty(t, cs)
	assert.ErrorContains(t, err, "default/odd/app", "the error names the container")
}

// A pod that sets pod-level resources is also sampled at its pod cgroup,
// as the entry (pod): a pod-level cpu limit throttles there only. A pod
// whose containers have not started has none, and trimming keeps it.
func TestPodLevelResourcesAddThePodCgroup(t *testing.T) {
	layout := cgroup.Layout{Driver: cgroup.DriverCgroupfs}
	web := podOn("n1", "web", "6f1c9e2a-3b4d-4e5f-8a9b-0c1d2e3f4a5b", true)
	starting := podOn("n1", "starting", "7f1c9e2a-3b4d-4e5f-8a9b-0c1d2e3f4a5b", false)
	for _, p := range []*corev1.Pod{web, starting} {
		p.Spec.Resources = &corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}}
	}
	for _, pods := range [][]*corev1.Pod{{web, starting}, {trimPod(web), trimPod(starting)}} {
		cs, err := Containers(pods, layout)
		require.NoError(t, err)
		require.Len(t, cs, 2)
		assert.Equal(t, "app", cs[0].Name)
		assert.Equal(t, report.ContainerKey{PodUID: "6f1c9e2a-3b4d-4e5f-8a9b-0c1d2e3f4a5b", Name: v1alpha1.PodLevel}, cs[1].Key())
		assert.Equal(t, "/kubepods/burstable/pod6f1c9e2a-3b4d-4e5f-8a9b-0c1d2e3f4a5b", cs[1].CgroupPath)
	}
}

// TestInformerDiscoverySeesOnlyItsNodesPods runs the informer fallback on a
// real apiserver: pods of another node never reach the sampler, and a pod
// deleted is dropped.
func TestInformerDiscoverySeesOnlyItsNodesPods(t *testing.T) {
	cp := controlplane.StartForTest(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	h, err := cgroup.Detect()
	require.NoError(t, err)
	s := NewSampler(h)
	defer s.Close()
	d := &Discovery{Layout: cgroup.Layout{Driver: cgroup.DriverCgroupfs}, Sampler: s, Log: testLog()}
	done := make(chan error, 1)
	client, err := NewPodClient(cp.Config)
	require.NoError(t, err)
	// As the agent runs it (Agent.chooseDiscovery, then Agent.Run).
	go func() { done <- d.Run(ctx, &InformerPods{Client: client, NodeName: "node-a", Log: d.Log}) }()

	create := func(node, name string) *corev1.Pod {
		p := podOn(node, name, "", true)
		p.UID = ""
		created, err := cp.Clientset.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{})
		require.NoError(t, err)
		qos := created.Status.QOSClass // the apiserver's, and immutable
		created.Status = p.Status
		created.Status.QOSClass = qos
		created, err = cp.Clientset.CoreV1().Pods("default").UpdateStatus(ctx, created, metav1.UpdateOptions{})
		require.NoError(t, err)
		return created
	}
	mine := create("node-a", "mine")
	create("node-b", "theirs")
	require.Eventually(t, func() bool { return s.Stats().Tracked == 1 }, 10*time.Second, 20*time.Millisecond)
	time.Sleep(300 * time.Millisecond)
	assert.Equal(t, 1, s.Stats().Tracked, "another node's pod was tracked")

	require.NoError(t, cp.Clientset.CoreV1().Pods("default").Delete(ctx, mine.Name, *metav1.NewDeleteOptions(0)))
	require.Eventually(t, func() bool { return s.Stats().Tracked == 0 }, 10*time.Second, 20*time.Millisecond)
	cancel()
	require.NoError(t, <-done)
}

// TestInformerPodsWithoutTheRightToListPodsStopsAndNamesTheRole runs the
// informer as a service account that may not list pods (the shipped
// RBAC's agent without kerf-agent-pods): it must stop with the role and
// the flags to set, not retry a 403 forever.
func TestInformerPodsWithoutTheRightToListPodsStopsAndNamesTheRole(t *testing.T) {
	cp := controlplane.StartForTest(t)
	cfg := rest.CopyConfig(cp.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:kerf-system:kerf-agent",
		Groups: []string{"system:serviceaccounts", "system:authenticated"}}
	client, err := NewPodClient(cfg)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err = (&InformerPods{Client: client, NodeName: "node-a", Log: testLog()}).Run(ctx, func([]*corev1.Pod) {
		t.Error("no pods may reach discovery")
	})
	require.NoError(t, ctx.Err(), "Run must stop by itself")
	require.ErrorIs(t, err, ErrPodsForbidden)
	assert.True(t, apierrors.IsForbidden(err), "the apiserver's refusal is kept: %v", err)
	for _, want := range []string{"kerf-agent-pods", "agent.podsFromAPIServer", "manifests/agent-pods", "--pods-api-socket", "node-a"} {
		assert.ErrorContains(t, err, want)
	}
}

func TestInformerDiscoveryNeedsANodeName(t *testing.T) {
	d := &Discovery{Log: testLog()}
	assert.ErrorContains(t, d.Run(context.Background(), &InformerPods{Log: d.Log}), "node name is empty")
	assert.ErrorContains(t, (&InformerPods{NodeName: "n"}).Run(context.Background(), nil), "no apiserver client")
}

func testLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// withStatus returns a copy of p whose app container has restarted
// restarts times, the last run ended as last (nil: none).
func withStatus(p *corev1.Pod, restarts int32, last *corev1.ContainerStateTerminated) *corev1.Pod {
	p = p.DeepCopy()
	p.Status.ContainerStatuses[0].RestartCount = restarts
	if last != nil {
		p.Status.ContainerStatuses[0].LastTerminationState.Terminated = last
	}
	return p
}

func TestDiscoveryReportsRestartsAndTerminationsAfterTheBaseline(t *testing.T) {
	h, err := cgroup.Detect()
	require.NoError(t, err)
	s := NewSampler(h)
	defer s.Close()
	var got []report.ContainerEvent
	d := &Discovery{Layout: cgroup.Layout{Driver: cgroup.DriverCgroupfs}, Sampler: s, Log: testLog(),
		Events: func(ev report.ContainerEvent) { got = append(got, ev) }}
	web := podOn("n1", "web", "6f1c9e2a-3b4d-4e5f-8a9b-0c1d2e3f4a5b", true)
	oomKilled := &corev1.ContainerStateTerminated{Reason: "OOMKilled", ExitCode: 137, ContainerID: "containerd://aaa",
		FinishedAt: metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))}
	errored := &corev1.ContainerStateTerminated{Reason: "Error", ExitCode: 1, ContainerID: "containerd://bbb",
		FinishedAt: metav1.NewTime(time.Date(2026, 1, 2, 3, 9, 0, 0, time.UTC))}

	d.update([]*corev1.Pod{withStatus(web, 2, oomKilled)})
	assert.Empty(t, got, "what the first set holds happened before the agent looked")
	assert.Equal(t, 1, s.Stats().Tracked)

	d.update([]*corev1.Pod{withStatus(web, 2, oomKilled)})
	assert.Empty(t, got, "an unchanged status is no event")

	d.update([]*corev1.Pod{withStatus(web, 3, errored)})
	require.Len(t, got, 1)
	assert.Equal(t, report.ContainerEvent{Namespace: "default", Pod: "web", PodUID: string(web.UID), Container: "app",
		RestartCount: 3, Terminated: errored}, got[0])

	// The kubelet shows a run's end in state.terminated, then in
	// lastState once the container runs again: one event for it.
	got = nil
	ended := withStatus(web, 3, errored)
	ended.Status.ContainerStatuses[0].State = corev1.ContainerState{Terminated: oomKilled.DeepCopy()}
	ended.Status.ContainerStatuses[0].State.Terminated.ContainerID = "containerd://ccc"
	d.update([]*corev1.Pod{ended})
	require.Len(t, got, 1)
	assert.Equal(t, "OOMKilled", got[0].Terminated.Reason)
	assert.Equal(t, int32(137), got[0].Terminated.ExitCode)
	restarted := withStatus(web, 4, ended.Status.ContainerStatuses[0].State.Terminated)
	d.update([]*corev1.Pod{restarted})
	require.Len(t, got, 2)
	assert.Nil(t, got[1].Terminated, "the same termination moved to lastState is not reported again")
	assert.Equal(t, int32(4), got[1].RestartCount)

	got = nil
	other := podOn("n1", "new", "7f1c9e2a-3b4d-4e5f-8a9b-0c1d2e3f4a5b", true)
	d.update([]*corev1.Pod{restarted, other})
	assert.Empty(t, got, "a new pod that has not restarted is no event")
}

// TestInformerPodsWaitsForTheFullSet checks the informer hands discovery
// the whole set first: the pods that exist before it starts are the
// baseline, not events.
func TestInformerPodsWaitsForTheFullSet(t *testing.T) {
	cp := controlplane.StartForTest(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for _, name := range []string{"a", "b", "c"} {
		p := podOn("node-a", name, "", true)
		p.UID = ""
		_, err := cp.Clientset.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	calls := make(chan []*corev1.Pod, 10)
	client, err := NewPodClient(cp.Config)
	require.NoError(t, err)
	src := &InformerPods{Client: client, NodeName: "node-a", Log: testLog()}
	done := make(chan error, 1)
	go func() { done <- src.Run(ctx, func(p []*corev1.Pod) { calls <- slices.Clone(p) }) }()
	select {
	case pods := <-calls:
		require.Len(t, pods, 3, "the first call has every pod")
		for _, p := range pods {
			assert.NotEmpty(t, p.UID)
			assert.Empty(t, p.ManagedFields, "the cache holds trimmed pods")
			assert.Empty(t, p.Spec.Containers, "the cache holds trimmed pods")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no pods after 10s")
	}
	cancel()
	require.NoError(t, <-done)
}

// TestTrimmedPodsGiveTheSameContainersAndEvents checks the pod caches'
// trimming keeps all discovery reads: the same containers and cgroups, and
// the same events, less the termination message.
func TestTrimmedPodsGiveTheSameContainersAndEvents(t *testing.T) {
	layout := cgroup.Layout{Driver: cgroup.DriverCgroupfs}
	web := podOn("n1", "web", "6f1c9e2a-3b4d-4e5f-8a9b-0c1d2e3f4a5b", true)
	web.Labels = map[string]string{"app": "web"}
	web.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubelet", Operation: metav1.ManagedFieldsOperationUpdate}}
	web.Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: "sidecar", ContainerID: testContainerID,
		State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Now()}}}}
	killed := withStatus(web, 1, &corev1.ContainerStateTerminated{Reason: "OOMKilled", ExitCode: 137, Message: "a long message",
		ContainerID: "containerd://aaa", StartedAt: metav1.Now(), FinishedAt: metav1.Now()})

	for _, p := range []*corev1.Pod{web, killed} {
		full, err := Containers([]*corev1.Pod{p}, layout)
		require.NoError(t, err)
		trimmed, err := Containers([]*corev1.Pod{trimPod(p)}, layout)
		require.NoError(t, err)
		assert.Len(t, full, 2)
		assert.Equal(t, full, trimmed)
	}
	tp := trimPod(killed)
	assert.Empty(t, tp.ManagedFields)
	assert.Empty(t, tp.Labels)
	assert.Empty(t, tp.Spec.Containers)

	events := func(trim bool) []report.ContainerEvent {
		h, err := cgroup.Detect()
		require.NoError(t, err)
		s := NewSampler(h)
		defer s.Close()
		var got []report.ContainerEvent
		d := &Discovery{Layout: layout, Sampler: s, Log: testLog(), Events: func(ev report.ContainerEvent) { got = append(got, ev) }}
		for _, p := range []*corev1.Pod{web, killed} {
			if trim {
				p = trimPod(p)
			}
			d.update([]*corev1.Pod{p})
		}
		return got
	}
	want := events(false)
	require.Len(t, want, 1)
	want[0].Terminated = want[0].Terminated.DeepCopy()
	want[0].Terminated.Message = ""
	assert.Equal(t, want, events(true))
}
