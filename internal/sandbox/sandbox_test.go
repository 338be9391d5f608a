package sandbox

import (
	"context"
	"crypto/tls"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/kerf-dev/kerf/test/controlplane"
)

// skipOrFail skips a test that cannot run here, or fails it where the
// real cluster is required (make test, CI).
func skipOrFail(t *testing.T, format string, args ...any) {
	t.Helper()
	if controlplane.Required() {
		t.Fatalf(format, args...)
	}
	t.Skipf(format, args...)
}

// testLog sends progress to the test's log.
type testLog struct{ t *testing.T }

func (w testLog) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// TestUpRunsPodsAndDownLeavesNothing brings a real one-node cluster up in
// a temporary state directory, runs a pod to Running, checks that a second
// Up reuses the cluster, that a partial one is refused and that Up after a
// crash starts over, then checks
// that Down leaves no process, mount, bridge, iptables chain or directory.
func TestUpRunsPodsAndDownLeavesNothing(t *testing.T) {
	if os.Geteuid() != 0 {
		skipOrFail(t, "kerf-sandbox needs root (mounts, cgroups, bridge, iptables)")
	}
	if _, err := resolve(Options{StateDir: "/var/tmp/x"}); err != nil {
		skipOrFail(t, "sandbox binaries not available: %v", err)
	}
	// Other test packages bring sandboxes up too: one at a time.
	unlock, err := Lock(t.Context())
	require.NoError(t, err)
	t.Cleanup(unlock)
	if err := checkPorts(); err != nil {
		skipOrFail(t, "another sandbox seems to run on this machine: %v", err)
	}
	if linkExists(BridgeName) {
		skipOrFail(t, "another sandbox seems to run on this machine: %s exists", BridgeName)
	}
	var absent []string // host directories Down must remove again
	for _, p := range hostPaths {
		if _, err := os.Stat(p); os.IsNotExist(err) {
			absent = append(absent, p)
		}
	}
	stateDir, err := os.MkdirTemp("/var/tmp", "kerf-sandbox-test-")
	require.NoError(t, err)
	require.NoError(t, os.Remove(stateDir)) // Up creates it
	log := slog.New(slog.NewTextHandler(testLog{t}, nil))
	t.Cleanup(func() { _ = Down(context.Background(), stateDir, log) })

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	opts := Options{StateDir: stateDir, PauseImage: writePauseArchive(t, t.TempDir()), Log: log}

	began := time.Now()
	c, err := Up(ctx, opts)
	require.NoError(t, err)
	t.Logf("FIGURE Up (cold): %s", seconds(time.Since(began)))
	assert.False(t, c.Reused)
	assert.FileExists(t, c.Kubeconfig)

	// The kubelet's Pods API socket is visible where the agent looks.
	for _, p := range []string{c.PodsAPISocket, c.HostPodsAPISocket} {
		st, err := os.Stat(p)
		require.NoError(t, err, "Pods API socket")
		assert.Equal(t, os.ModeSocket, st.Mode().Type(), "%s is a socket", p)
	}
	conn, err := net.Dial("unix", c.HostPodsAPISocket)
	require.NoError(t, err, "the kubelet answers on the host's Pods API socket")
	_ = conn.Close()

	// A real pod: scheduled, sandboxed by containerd + runc, networked by
	// the CNI bridge, Running.
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "pause"},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "pause", Image: PauseImageRef, ImagePullPolicy: corev1.PullNever}},
			// The pause binary ignores nothing but SIGTERM: no need to wait.
			TerminationGracePeriodSeconds: ptr.To[int64](1),
		},
	}
	began = time.Now()
	_, err = c.Clientset.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{})
	require.NoError(t, err)
	waitCtx, waitCancel := context.WithTimeout(ctx, 2*time.Minute)
	running, err := c.WaitPodRunning(waitCtx, "default", "pause")
	waitCancel()
	require.NoError(t, err)
	t.Logf("FIGURE pod POST -> Running: %s", time.Since(began).Round(time.Millisecond))
	assert.Equal(t, NodeIP, running.Status.HostIP)
	assert.True(t, strings.HasPrefix(running.Status.PodIP, "10.88.77."), "pod IP %s in %s", running.Status.PodIP, PodCIDR)

	// The apiserver reaches the kubelet (x509 + webhook authentication).
	_, err = c.Clientset.CoreV1().Pods("default").GetLogs("pause", &corev1.PodLogOptions{}).DoRaw(ctx)
	assert.NoError(t, err, "pod logs through the kubelet")

	// From inside the pod's network namespace the kubernetes Service leads
	// to the apiserver (kube-proxy's rules, the bridge), as in-cluster
	// clients such as the leader need.
	assertPodReachesAPIServer(t, c, layout{state: stateDir})

	// A second Up finds the healthy sandbox and reuses it.
	began = time.Now()
	again, err := Up(ctx, opts)
	require.NoError(t, err)
	t.Logf("FIGURE Up (reuse): %s", seconds(time.Since(began)))
	assert.True(t, again.Reused)
	st, err := Status(ctx, stateDir)
	require.NoError(t, err)
	assert.True(t, st.Healthy(), "status:\n%s", st)

	// One component dead: Up refuses and says what to run.
	for _, comp := range st.Components {
		if comp.Name == "kube-proxy" {
			require.NoError(t, syscall.Kill(comp.PID, syscall.SIGKILL))
		}
	}
	require.Eventually(t, func() bool {
		st, err := Status(ctx, stateDir)
		return err == nil && st.Running() == len(st.Components)-1
	}, 20*time.Second, 50*time.Millisecond)
	_, err = Up(ctx, opts)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "kerf-sandbox down")
	assert.Contains(t, err.Error(), "kube-proxy")

	// A crash: every component killed at once. Up cleans and starts over.
	for _, comp := range st.Components {
		_ = syscall.Kill(comp.PID, syscall.SIGKILL)
	}
	require.Eventually(t, func() bool {
		st, err := Status(ctx, stateDir)
		return err == nil && st.Running() == 0
	}, 20*time.Second, 50*time.Millisecond)
	began = time.Now()
	fresh, err := Up(ctx, opts)
	require.NoError(t, err)
	t.Logf("FIGURE Up (after a crash, cleaning first): %s", seconds(time.Since(began)))
	assert.False(t, fresh.Reused)
	_, err = fresh.Clientset.CoreV1().Pods("default").Get(ctx, "pause", metav1.GetOptions{})
	assert.True(t, ignoreNotFound(err) == nil && err != nil, "the fresh cluster has none of the old pods: %v", err)
	for i := range 3 {
		p := pod.DeepCopy()
		p.Name = "pause-" + strconv.Itoa(i)
		began = time.Now()
		_, err = fresh.Clientset.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{})
		require.NoError(t, err)
		waitCtx, waitCancel = context.WithTimeout(ctx, 2*time.Minute)
		_, err = fresh.WaitPodRunning(waitCtx, "default", p.Name)
		waitCancel()
		require.NoError(t, err)
		t.Logf("FIGURE pod POST -> Running (warm cluster): %s", time.Since(began).Round(time.Millisecond))
	}

	began = time.Now()
	require.NoError(t, Down(ctx, stateDir, log))
	t.Logf("FIGURE Down (three pods running): %s", seconds(time.Since(began)))
	assertNothingLeft(t, stateDir)
	for _, p := range absent {
		_, err := os.Stat(p)
		assert.True(t, os.IsNotExist(err), "%s was made by the sandbox and is left", p)
	}

	// Down again: nothing to do, no error.
	require.NoError(t, Down(ctx, stateDir, log))
}

// assertNothingLeft checks that no trace of the sandbox at stateDir is left.
func assertNothingLeft(t *testing.T, stateDir string) {
	t.Helper()
	_, err := os.Stat(stateDir)
	assert.True(t, os.IsNotExist(err), "state dir %s still exists", stateDir)
	for _, pid := range pids() {
		if cmdlineMentions(pid, stateDir) && alive(pid) {
			cmd, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
			t.Errorf("process %d still runs: %s", pid, strings.ReplaceAll(string(cmd), "\x00", " "))
		}
	}
	mps, err := mountsUnder(stateDir, HostPodsAPIDir)
	require.NoError(t, err)
	assert.Empty(t, mps, "mounts left")
	assert.False(t, linkExists(BridgeName), "bridge %s left", BridgeName)
	for _, table := range []string{"filter", "nat", "mangle"} {
		out, err := exec.Command("iptables", "-t", table, "-S").Output()
		require.NoError(t, err)
		for _, line := range strings.Split(string(out), "\n") {
			if strings.Contains(line, "KUBE-") || strings.Contains(line, "CNI-") {
				t.Errorf("iptables -t %s: left: %s", table, line)
			}
		}
	}
	assert.NoError(t, checkPorts(), "a port is still in use")
}

// assertPodReachesAPIServer enters the network namespace of one of the
// sandbox's containers and asks https://10.96.0.1/version.
func assertPodReachesAPIServer(t *testing.T, c *Cluster, l layout) {
	t.Helper()
	var container int
	for _, shim := range shims(l) {
		for _, pid := range pids() {
			if parentPID(pid) == shim {
				container = pid
			}
		}
	}
	require.NotZero(t, container, "a container process under the sandbox's shims")
	conn, err := dialInNetns(container, APIServiceIP+":443")
	require.NoError(t, err, "dial the kubernetes Service from the pod's network namespace")
	tlsCfg, err := tlsFromConfig(c)
	require.NoError(t, err)
	tlsCfg.ServerName = "kubernetes.default.svc"
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		DialTLSContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			tc := tls.Client(conn, tlsCfg)
			return tc, tc.HandshakeContext(ctx)
		},
	}}
	resp, err := client.Get("https://" + APIServiceIP + "/version")
	require.NoError(t, err)
	defer resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)
}

// dialInNetns opens a TCP connection from pid's network namespace.
func dialInNetns(pid int, addr string) (net.Conn, error) {
	type result struct {
		conn net.Conn
		err  error
	}
	ch := make(chan result, 1)
	go func() {
		// The thread stays locked and is dropped with the goroutine, so a
		// thread in the pod's namespace never runs other goroutines.
		runtime.LockOSThread()
		target, err := os.Open("/proc/" + strconv.Itoa(pid) + "/ns/net")
		if err != nil {
			ch <- result{err: err}
			return
		}
		defer target.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			ch <- result{err: err}
			return
		}
		conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
		ch <- result{conn, err}
	}()
	r := <-ch
	return r.conn, r.err
}
