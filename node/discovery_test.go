package node

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kerf-dev/kerf/cgroup"
	"github.com/kerf-dev/kerf/test/controlplane"
)

const testContainerID = "containerd://0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

func podOn(node, name string, uid types.UID, running bool) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: uid},
		Spec:       corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "app", Image: "kerf.local/kerf-workload:1"}}},
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
	assert.Equal(t, ContainerKey{PodUID: "6f1c9e2a-3b4d-4e5f-8a9b-0c1d2e3f4a5b", Name: "app"}, cs[0].Key())

	bad := podOn("n1", "odd", "6f1c9e2a-3b4d-4e5f-8a9b-0c1d2e3f4a5b", true)
	bad.Status.ContainerStatuses[0].ContainerID = "rkt://abc"
	cs, err = Containers([]*corev1.Pod{bad}, layout)
	assert.Empty(t, cs)
	assert.ErrorContains(t, err, "default/odd/app", "the error names the container")
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
	go func() { done <- d.RunInformer(ctx, cp.Clientset, "node-a") }()

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

func TestInformerDiscoveryNeedsANodeName(t *testing.T) {
	d := &Discovery{Log: testLog()}
	assert.ErrorContains(t, d.RunInformer(context.Background(), nil, ""), "node name is empty")
}

func testLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }
