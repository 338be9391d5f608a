package integration

// Pod discovery through a real kubelet's Pods API (design section 5), in
// the one-node sandbox cluster (internal/sandbox): the agent's KubeletPods
// source finds a real pod's container and its real cgroup, and reports the
// container's OOM kill and restart, before the apiserver has the status.

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"

	"github.com/kerf-dev/kerf/cgroup"
	"github.com/kerf-dev/kerf/internal/images"
	"github.com/kerf-dev/kerf/internal/kube"
	"github.com/kerf-dev/kerf/internal/sandbox"
	"github.com/kerf-dev/kerf/internal/scenario"
	"github.com/kerf-dev/kerf/node"
	"github.com/kerf-dev/kerf/node/report"
	"github.com/kerf-dev/kerf/test/controlplane"
	"github.com/kerf-dev/kerf/test/streamtest"
)

// sandboxStateEnv names a sandbox state directory to use (a sandbox
// already up there is reused); without it the test brings one up in a
// temporary directory and takes it down after.
const sandboxStateEnv = "KERF_SANDBOX_STATE"

// skipOrFail skips a test that cannot run here, or fails it where the real
// cluster is required (make test).
func skipOrFail(t *testing.T, format string, args ...any) {
	t.Helper()
	if controlplane.Required() {
		t.Fatalf(format, args...)
	}
	t.Skipf(format, args...)
}

// lockWait bounds the wait for the machine's sandbox lock, within the
// package's 60 minutes (make test's -timeout): the e2e package holds it
// for its whole run, which took 23 minutes beside the 25,000-workload
// benchmark, and an 18-minute wait failed.
const lockWait = 40 * time.Minute

// upSandbox returns a running sandbox with the workload image imported.
func upSandbox(t *testing.T, ctx context.Context) (*sandbox.Cluster, string) {
	t.Helper()
	if os.Geteuid() != 0 {
		skipOrFail(t, "the sandbox needs root (mounts, cgroups, bridge, iptables)")
	}
	root, err := kube.RepoRoot()
	require.NoError(t, err)
	var pause, workload images.Image
	for _, img := range images.Kerf {
		switch img.Command {
		case "kerf-pause":
			pause = img
		case "kerf-workload":
			workload = img
		}
	}
	archives, err := images.Build(ctx, images.Options{RepoRoot: root, OutDir: t.TempDir(), Images: []images.Image{pause, workload}})
	require.NoError(t, err)
	log := slog.New(slog.NewTextHandler(streamtest.LogWriter(t), &slog.HandlerOptions{Level: slog.LevelWarn}))
	stateDir := os.Getenv(sandboxStateEnv)
	if stateDir == "" {
		// Other test packages bring sandboxes up too: one at a time. The
		// e2e package holds the lock for its whole run (lockWait): wait
		// for it, before the test's own 10 minutes, which start once the
		// sandbox is up.
		lctx, cancel := context.WithTimeout(context.Background(), lockWait)
		defer cancel()
		unlock, err := sandbox.Lock(lctx)
		require.NoError(t, err)
		t.Cleanup(unlock)
		stateDir, err = os.MkdirTemp("/var/tmp", "kerf-chain-sandbox-")
		require.NoError(t, err)
		require.NoError(t, os.Remove(stateDir)) // Up creates it
		t.Cleanup(func() { _ = sandbox.Down(context.Background(), stateDir, log) })
	}
	c, err := sandbox.Up(ctx, sandbox.Options{StateDir: stateDir, PauseImage: archives[0].Path, Log: log})
	if err != nil {
		// Its addresses are fixed: another sandbox on the machine (another
		// test package's) holds them.
		skipOrFail(t, "the sandbox cannot start here (set %s to reuse a running one): %v", sandboxStateEnv, err)
	}
	require.NoError(t, c.ImportImage(ctx, archives[1].Path))
	return c, workload.Ref
}

// events records the container events discovery reports, with when.
type events struct {
	mu  sync.Mutex
	got []report.ContainerEvent
	at  []time.Time
}

func (e *events) add(ev report.ContainerEvent) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.got, e.at = append(e.got, ev), append(e.at, time.Now())
}

// first returns the first event about the container that match says yes
// to, and when it came.
func (e *events) first(uid, container string, match func(report.ContainerEvent) bool) (report.ContainerEvent, time.Time, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for i, ev := range e.got {
		if ev.PodUID == uid && ev.Container == container && match(ev) {
			return ev, e.at[i], true
		}
	}
	return report.ContainerEvent{}, time.Time{}, false
}

func TestKubeletPodsAPIDiscoversContainersAndSeesOOMKillsFirst(t *testing.T) {
	c, workloadRef := upSandbox(t, t.Context())
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	// What --discovery=auto probes: the kubelet's socket and the path the
	// agent DaemonSet mounts it at answer; a missing one says so.
	require.NoError(t, node.ProbePodsAPI(ctx, c.PodsAPISocket, 0), "the kubelet's Pods API answers")
	require.NoError(t, node.ProbePodsAPI(ctx, c.HostPodsAPISocket, 0), "the kubelet's Pods API answers on the host path")
	err := node.ProbePodsAPI(ctx, filepath.Join(t.TempDir(), "absent.sock"), 0)
	assert.ErrorIs(t, err, os.ErrNotExist)

	h, err := cgroup.Detect()
	require.NoError(t, err)
	sampler := node.NewSampler(h)
	defer sampler.Close()
	var evs events
	log := slog.New(slog.NewTextHandler(streamtest.LogWriter(t), nil))
	d := &node.Discovery{Layout: cgroup.Layout{Driver: cgroup.DriverCgroupfs}, Sampler: sampler, Log: log, Events: evs.add}
	dctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- d.Run(dctx, &node.KubeletPods{Socket: c.PodsAPISocket, Log: log}) }()
	t.Cleanup(func() {
		stop()
		assert.NoError(t, <-done)
	})

	// A container that allocates past its memory limit when told: the
	// kernel OOM-kills it and the kubelet restarts it.
	name := fmt.Sprintf("oom-%d", time.Now().UnixNano()%100000)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
		Spec: corev1.PodSpec{
			NodeName:                      c.NodeName,
			TerminationGracePeriodSeconds: ptr.To[int64](1),
			Containers: []corev1.Container{{
				Name: "app", Image: workloadRef, ImagePullPolicy: corev1.PullNever,
				Args: []string{"--listen=:8080"},
				Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{
					corev1.ResourceMemory: resource.MustParse("32Mi"), corev1.ResourceCPU: resource.MustParse("200m")}},
			}},
		},
	}
	// The apiserver's view, to compare with the kubelet's.
	w, err := c.Clientset.CoreV1().Pods("default").Watch(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("metadata.name", name).String()})
	require.NoError(t, err)
	defer w.Stop()
	created, err := c.Clientset.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = c.Clientset.CoreV1().Pods("default").Delete(context.Background(), name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
	})
	uid := string(created.UID)
	running, err := c.WaitPodRunning(ctx, "default", name)
	require.NoError(t, err)
	tracked := func(containerID string) bool {
		sampler.Sample(time.Now())
		for _, s := range sampler.Latest(nil) {
			if s.Key.PodUID == uid && s.Key.Name == "app" {
				c, ok := sampler.ByCgroup(cgroupOf(t, running, containerID))
				return ok && c.ContainerID == containerID
			}
		}
		return false
	}
	first := running.Status.ContainerStatuses[0].ContainerID
	require.Eventually(t, func() bool { return tracked(first) }, 30*time.Second, 100*time.Millisecond,
		"the running container's cpu.stat was never read")
	// Sent again until it reached the workload: on a loaded machine the
	// one POST made before could fail unsent, and no OOM kill came.
	require.NoError(t, (&scenario.Env{}).Control(ctx, running, "alloc", "mib=64"), "ask the workload to allocate over its limit")

	isOOM := func(ev report.ContainerEvent) bool {
		return ev.Terminated != nil && ev.Terminated.Reason == "OOMKilled"
	}
	var apiserverAt time.Time
	deadline := time.After(2 * time.Minute)
	for apiserverAt.IsZero() {
		select {
		case e, ok := <-w.ResultChan():
			require.True(t, ok, "the apiserver watch ended")
			if e.Type != watch.Modified && e.Type != watch.Added {
				continue
			}
			p := e.Object.(*corev1.Pod)
			for _, s := range p.Status.ContainerStatuses {
				for _, term := range []*corev1.ContainerStateTerminated{s.State.Terminated, s.LastTerminationState.Terminated} {
					if term != nil && term.Reason == "OOMKilled" {
						apiserverAt = time.Now()
					}
				}
			}
		case <-deadline:
			t.Fatal("the apiserver never showed the OOM kill in 2 minutes")
		}
	}
	require.Eventually(t, func() bool { _, _, ok := evs.first(uid, "app", isOOM); return ok }, 30*time.Second, 50*time.Millisecond,
		"the kubelet's Pods API never reported the OOM kill")
	ev, kubeletAt, _ := evs.first(uid, "app", isOOM)
	assert.Equal(t, int32(137), ev.Terminated.ExitCode)
	assert.Equal(t, "default", ev.Namespace)
	assert.Equal(t, name, ev.Pod)
	t.Logf("FIGURE OOM kill seen through the kubelet's Pods API %v before the apiserver's watch (negative: after)", apiserverAt.Sub(kubeletAt))

	// The kubelet restarts the container: discovery reports the new
	// restart count and tracks the new container's cgroup, which is real.
	require.Eventually(t, func() bool {
		_, _, ok := evs.first(uid, "app", func(ev report.ContainerEvent) bool { return ev.RestartCount >= 1 })
		return ok
	}, time.Minute, 100*time.Millisecond, "no restart reported")
	require.Eventually(t, func() bool {
		p, err := c.Clientset.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
		if err != nil || p.Status.ContainerStatuses[0].State.Running == nil {
			return false
		}
		id := p.Status.ContainerStatuses[0].ContainerID
		return id != first && tracked(id)
	}, time.Minute, 200*time.Millisecond, "the restarted container's cpu.stat was never read")
}

// cgroupOf is the cgroup path of the pod's container with containerID.
func cgroupOf(t *testing.T, p *corev1.Pod, containerID string) string {
	t.Helper()
	dir, err := cgroup.Layout{Driver: cgroup.DriverCgroupfs}.ContainerDir(
		cgroup.PodCgroup{UID: string(p.UID), QoS: cgroup.QoSClass(p.Status.QOSClass)}, containerID)
	require.NoError(t, err)
	return dir
}
