package cluster_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/cluster"
	"github.com/kerf-dev/kerf/cluster/fence"
	"github.com/kerf-dev/kerf/test/controlplane"
	"github.com/kerf-dev/kerf/test/kubetest"
	"github.com/kerf-dev/kerf/test/leadertest"
)

// The frozen leader of TestFrozenLeaderWritesNothingAfterWaking is this
// test binary run again with these variables set: init runs it instead of
// the tests (before TestMain starts a control plane of its own).
const (
	fenceChildEnv      = "KERF_TEST_FENCE_CHILD"
	fenceKubeconfigEnv = "KERF_TEST_FENCE_KUBECONFIG"
	fenceNamespaceEnv  = "KERF_TEST_FENCE_NAMESPACE"
)

// fenceLease are the child's and the standby's lease timings: short, so
// that the freeze outlasts the Lease quickly, but with room for a loaded
// machine, so that the child keeps the Lease until it is frozen.
var fenceLease = cluster.Config{LeaseDuration: 4 * time.Second, RenewDeadline: 3 * time.Second, RetryPeriod: 200 * time.Millisecond}

func init() {
	if os.Getenv(fenceChildEnv) == "" {
		return
	}
	os.Exit(runFencedChild())
}

// runFencedChild runs leader "a" until it loses the Lease. Once it has
// recorded a change, decided and about to apply it, it freezes the way a
// process paused at the worst moment does: right after a renew of the
// Lease succeeded (the elector is asleep until its next one) the
// reconcile prints "decided" and stops the process with SIGSTOP. When the
// test continues it, the reconcile's next step is the pod's resize, while
// the elector starts a fresh renew deadline: it reads the Lease, finds
// another holder, and retries for a whole renew deadline before it gives
// up, so a believes it leads for that long after waking. On exit it
// prints how many writes its fence refused.
func runFencedChild() int {
	rc, err := clientcmd.BuildConfigFromFlags("", os.Getenv(fenceKubeconfigEnv))
	if err != nil {
		fmt.Fprintln(os.Stderr, "kubeconfig:", err)
		return 2
	}
	ns := os.Getenv(fenceNamespaceEnv)
	cfg := fenceLease
	cfg.Namespace, cfg.LeaseName, cfg.Identity, cfg.WatchNamespaces = ns, "kerf-leader", "a", []string{ns}
	var (
		once sync.Once
		l    *cluster.Leader
	)
	cfg.AfterRecord = func(context.Context, *v1alpha1.RightsizingRecommendation) {
		once.Do(func() {
			renewed := cluster.FenceOf(l).Renewed
			// The renew is noted once its answer was read: the elector
			// only logs and sleeps after it.
			for last := renewed(); renewed().Equal(last); {
				time.Sleep(time.Millisecond)
			}
			fmt.Println("decided")
			_ = syscall.Kill(os.Getpid(), syscall.SIGSTOP)
		})
	}
	l, err = cluster.New(cfg, rc, slog.New(slog.NewTextHandler(os.Stderr, nil)).With("identity", "a"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "leader:", err)
		return 2
	}
	err = l.Run(context.Background())
	fmt.Printf("fenced %v\n", fencedWrites(l))
	fmt.Printf("run %v\n", err)
	return 0
}

// TestFrozenLeaderWritesNothingAfterWaking freezes leader a (a separate
// process, runFencedChild) with SIGSTOP right after it recorded an InPlace
// change and before it resized the pod, between two renews of its Lease.
// Its Lease runs out; leader b takes over, finishes the change, sees the
// pod OOM-killed and resizes its memory back to the previous value. Then
// a is continued: its elector starts a fresh renew deadline and believes
// it leads until that has passed, while its reconcile goes on to resize
// the pod to the change's values again, over b's rollback (the resize
// reads the pod afresh on conflict, so no stale resourceVersion stops it).
// Its fence refuses the write: its newest renew is older than the renew
// deadline. The pod keeps b's values, a logs and counts the refusal and
// exits on the lost Lease. Without the fence a's resize lands within
// milliseconds of waking (b resizes the pod back soon after).
func TestFrozenLeaderWritesNothingAfterWaking(t *testing.T) {
	cp := controlplane.Get(t)
	c := cp.Client
	ns := kubetest.Namespace(t, c)
	ctx := context.Background()
	dep := kubetest.Web(t, c, ns, kubetest.PolicyWith(ns, time.Hour, nil))
	pod := kubetest.RunningPod(t, c, dep)

	exe, err := os.Executable()
	require.NoError(t, err)
	child := exec.Command(exe, "-test.run=^$")
	child.Env = append(os.Environ(), "GOMAXPROCS=1", fenceChildEnv+"=1", fenceKubeconfigEnv+"="+cp.Kubeconfig, fenceNamespaceEnv+"="+ns)
	var stderr bytes.Buffer
	child.Stderr = &stderr
	stdout, err := child.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, child.Start())
	exited := make(chan error, 1)
	lines := make(chan string, 16)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		exited <- child.Wait()
	}()
	t.Cleanup(func() {
		_ = child.Process.Signal(syscall.SIGCONT)
		_ = child.Process.Kill()
		if t.Failed() {
			t.Logf("leader a's log:\n%s", stderr.String())
		}
	})
	holder := func() string {
		var lease coordinationv1.Lease
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "kerf-leader"}, &lease); err != nil || lease.Spec.HolderIdentity == nil {
			return ""
		}
		return *lease.Spec.HolderIdentity
	}
	kubetest.WaitFor(t, 30*time.Second, func() bool { return holder() == "a" }, "a never led")
	b := leadertest.StartReplica(t, ns, "b", fenceLease)

	require.NoError(t, c.Create(ctx, kubetest.Recommendation(ns, "web", "web", v1alpha1.StrategyInPlace, "250m", "128Mi")))
	select {
	case l := <-lines:
		require.Equal(t, "decided", l)
	case <-time.After(30 * time.Second):
		t.Fatal("a never recorded the change")
	}
	kubetest.WaitFor(t, 10*time.Second, func() bool { return processState(child.Process.Pid) == "T" }, "a is not stopped")
	frozen := time.Now()

	// b takes over and acts: it finishes the change a recorded, then the
	// pod is OOM-killed and b resizes it back.
	kubetest.WaitFor(t, 30*time.Second, b.Leading, "b never took over")
	kubetest.KubeletReports(t, c, pod, "")
	kubetest.WaitPhase(t, c, ns, "web", v1alpha1.PhaseWatching, "")
	kubetest.OOMKilled(t, c, pod, "OOMKilled")
	kubetest.WaitPhase(t, c, ns, "web", v1alpha1.PhaseRolledBack, v1alpha1.HealthWatchOOMKills)
	requests := func() string {
		require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(pod), pod))
		r := pod.Spec.Containers[0].Resources.Requests
		return r.Cpu().String() + "/" + r.Memory().String()
	}
	kubetest.WaitFor(t, 20*time.Second, func() bool { return requests() == "250m/256Mi" }, "b never resized the memory back")
	require.Greater(t, time.Since(frozen), fenceLease.LeaseDuration, "a was frozen past its Lease")

	// a wakes in the middle of its apply. Every version of the pod from
	// now on is watched: b repairs a stale resize within moments, so only
	// the watch tells whether a's values ever reached the pod.
	w, err := cp.Clientset.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + pod.Name, ResourceVersion: pod.ResourceVersion})
	require.NoError(t, err)
	defer w.Stop()
	var (
		seenMu sync.Mutex
		seen   []string
	)
	go func() {
		for ev := range w.ResultChan() {
			if p, ok := ev.Object.(*corev1.Pod); ok {
				seenMu.Lock()
				seen = append(seen, p.Spec.Containers[0].Resources.Requests.Memory().String())
				seenMu.Unlock()
			}
		}
	}()
	require.NoError(t, child.Process.Signal(syscall.SIGCONT))
	select {
	case err := <-exited:
		require.NoError(t, err, "a's exit")
	case <-time.After(30 * time.Second):
		t.Fatal("a never stopped after losing its Lease")
	}
	var out []string
	for l := range lines {
		out = append(out, l)
	}
	time.Sleep(500 * time.Millisecond) // a write a sent would have landed by now
	seenMu.Lock()
	defer seenMu.Unlock()
	assert.NotContains(t, seen, "128Mi", "a's resize never reached the pod (memory of each version since a woke: %v)", seen)
	assert.Equal(t, "250m/256Mi", requests(), "the pod keeps b's values (memory rolled back), not a's 128Mi")
	require.Len(t, out, 2, "a's output: %q", out)
	assert.NotEqual(t, "fenced 0", out[0], "a counts its refused writes")
	assert.Equal(t, "run "+cluster.ErrLeadershipLost.Error(), out[1])
	assert.Contains(t, stderr.String(), "write refused: not leading")
	assert.Contains(t, stderr.String(), "/pods/"+pod.Name+"/resize", "the refused write is the pod's resize")
	assert.Equal(t, corev1.PodRunning, pod.Status.Phase)
}

// processState is the state letter of /proc/<pid>/stat ("T": stopped),
// "" when it cannot be read.
func processState(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 >= len(s) {
		return ""
	}
	return s[i+2 : i+3]
}

// TestLeaderWhoseLeaseWasTakenWritesNothing is the case no local clock
// can tell: a leader whose clocks stood still while it was paused (a VM
// paused with its clocks) wakes with a renew that looks fresh, and its
// elector believes it leads until its next renews fail for a whole renew
// deadline. Here the Lease is handed to another holder under leader a,
// as a replica that took over meanwhile would hold it, and a pod of a's
// watched change is OOM-killed at once: a would roll it back within
// milliseconds, long before its elector gives up. The fence reads the
// Lease before the write and refuses it: the change stays Watching, the
// template keeps the change's values, and a counts the refusal.
func TestLeaderWhoseLeaseWasTakenWritesNothing(t *testing.T) {
	c := controlplane.Get(t).Client
	ns := kubetest.Namespace(t, c)
	ctx := context.Background()
	dep, a := leadertest.WatchedWeb(t, c, ns, kubetest.PolicyWith(ns, time.Hour, nil), cluster.Config{}, "250m", "128Mi")
	pod := kubetest.AdoptedPod(t, c, dep, "web-new-1")
	time.Sleep(time.Until(time.Now().Truncate(time.Second).Add(1100 * time.Millisecond))) // the kill a second after T0
	require.True(t, a.Leading())

	// a's elector renews the Lease meanwhile: a conflict is read again.
	require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var lease coordinationv1.Lease
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "kerf-leader"}, &lease); err != nil {
			return err
		}
		lease.Spec.HolderIdentity = ptr.To("b")
		lease.Spec.RenewTime = &metav1.MicroTime{Time: time.Now()}
		return c.Update(ctx, &lease)
	}), "hand the Lease to b")
	writeOOMKill(t, c, pod)

	select {
	case err := <-a.Done:
		a.Done <- err // for the cleanup
		require.ErrorIs(t, err, cluster.ErrLeadershipLost)
	case <-time.After(30 * time.Second):
		t.Fatal("a never noticed it lost the Lease")
	}
	rsr := kubetest.GetRSR(t, c, ns, "web")
	assert.Equal(t, v1alpha1.PhaseWatching, rsr.Status.Phase, "a did not roll back under b's Lease")
	assert.Equal(t, "128Mi", kubetest.TemplateResources(t, c, dep).Requests.Memory().String(), "the template keeps the change's values")
	assert.Positive(t, fencedWrites(a.Leader), "a counted its refused writes")
}

// TestLeaderWhoseLeaseWasTakenEmitsNoEvents: the leader's Events are sent
// through the fence as well. An Event emitted while a leads is written;
// then the Lease is handed to another holder under a (as a replica that
// took over during a pause would hold it) and a emits another, as a
// broadcaster does that sends, on waking, what was emitted just before
// the pause: it is refused and counted, and never written. (With the
// recorder on the manager's unfenced client the second Event is written.)
func TestLeaderWhoseLeaseWasTakenEmitsNoEvents(t *testing.T) {
	cp := controlplane.Get(t)
	c := cp.Client
	ns := kubetest.Namespace(t, c)
	ctx := context.Background()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "regarding"}}
	require.NoError(t, c.Create(ctx, cm))
	a := leadertest.StartReplica(t, ns, "a", cluster.Config{})
	kubetest.WaitFor(t, 30*time.Second, a.Leading, "a never led")
	emitted := func(reason string) bool {
		list, err := cp.Clientset.EventsV1().Events(ns).List(ctx, metav1.ListOptions{})
		require.NoError(t, err)
		for _, e := range list.Items {
			if e.Reason == reason {
				return true
			}
		}
		return false
	}
	cluster.FenceOf(a.Leader).Recorder().Eventf(cm, nil, corev1.EventTypeNormal, "WhileLeading", "Test", "emitted while a leads")
	kubetest.WaitFor(t, 10*time.Second, func() bool { return emitted("WhileLeading") }, "the Event emitted while leading was never written")

	// a's elector renews the Lease meanwhile: a conflict is read again.
	require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var lease coordinationv1.Lease
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "kerf-leader"}, &lease); err != nil {
			return err
		}
		lease.Spec.HolderIdentity = ptr.To("b")
		lease.Spec.RenewTime = &metav1.MicroTime{Time: time.Now()}
		return c.Update(ctx, &lease)
	}), "hand the Lease to b")
	refused := fencedWrites(a.Leader)
	cluster.FenceOf(a.Leader).Recorder().Eventf(cm, nil, corev1.EventTypeNormal, "AfterLosing", "Test", "emitted after a lost the Lease")
	kubetest.WaitFor(t, 10*time.Second, func() bool { return emitted("AfterLosing") || fencedWrites(a.Leader) > refused },
		"the Event was neither written nor refused")
	time.Sleep(500 * time.Millisecond) // an Event written meanwhile would be listed by now
	assert.False(t, emitted("AfterLosing"), "a wrote an Event under b's Lease")
	assert.Greater(t, fencedWrites(a.Leader), refused, "a counted the refused Event")
}

// fencedWrites reads the writes l's fence refused
// (kerf_leader_fenced_writes_total) from its registry.
func fencedWrites(l *cluster.Leader) float64 {
	mfs, err := l.Registry().Gather()
	if err != nil {
		return -1
	}
	for _, mf := range mfs {
		if mf.GetName() == "kerf_leader_fenced_writes_total" {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	return 0
}

// TestTheRollbacksClientIsFenced: a replica that does not hold the Lease
// writes nothing through the rollbacks' client either.
func TestTheRollbacksClientIsFenced(t *testing.T) {
	c := controlplane.Get(t).Client
	ns := kubetest.Namespace(t, c)
	l, err := cluster.New(cluster.Config{Namespace: ns, LeaseName: "kerf-leader", Identity: "a", WatchNamespaces: []string{ns}},
		rest.CopyConfig(controlplane.Get(t).Config), slog.New(slog.NewTextHandler(io.Discard, nil)))
	require.NoError(t, err)
	err = cluster.RollbackWriter(l).Create(context.Background(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "unfenced"}})
	require.ErrorIs(t, err, fence.ErrNotLeading)
	assert.Equal(t, 1.0, fencedWrites(l))
	var cm corev1.ConfigMap
	assert.True(t, apierrors.IsNotFound(c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "unfenced"}, &cm)), "the write never reached the apiserver")
}
