package cluster_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/cgroup"
	"github.com/kerf-dev/kerf/cluster"
	"github.com/kerf-dev/kerf/cluster/cert"
	"github.com/kerf-dev/kerf/cluster/signals"
	"github.com/kerf-dev/kerf/test/agenttest"
	"github.com/kerf-dev/kerf/test/controlplane"
	"github.com/kerf-dev/kerf/test/freeport"
	"github.com/kerf-dev/kerf/test/kerneltest"
	"github.com/kerf-dev/kerf/test/kubetest"
	"github.com/kerf-dev/kerf/test/leadertest"
	"github.com/kerf-dev/kerf/test/streamtest"
)

// oomAllocEnv makes the test binary a process that allocates until the OOM
// killer stops it: a container's child process, killed under the
// container's limit while the container (its cgroup) lives on.
const oomAllocEnv = "KERF_CLUSTER_TEST_ALLOCATE"

var oomAllocated [][]byte

func init() {
	if os.Getenv(oomAllocEnv) == "" {
		return
	}
	for {
		chunk := make([]byte, 1<<20)
		for i := 0; i < len(chunk); i += 4096 {
			chunk[i] = 1
		}
		oomAllocated = append(oomAllocated, chunk)
	}
}

// oomKillChild runs a child process in the memory cgroup memDir that
// allocates past its limit, and returns once the OOM killer killed it.
func oomKillChild(t *testing.T, memDir string) {
	t.Helper()
	sh := exec.Command("/bin/sh", "-c", `echo $$ > "$1/cgroup.procs" && exec "$2" -test.run='^$'`, "sh", memDir, os.Args[0])
	sh.Env = append(os.Environ(), oomAllocEnv+"=1")
	err := sh.Run()
	require.Error(t, err, "the child must be killed")
	require.Contains(t, err.Error(), "killed", "killed by the OOM killer")
}

// agentProcess is the real kerf-agent binary as a child process.
type agentProcess struct {
	cmd  *exec.Cmd
	log  string
	done chan error
}

func startAgentProcess(t *testing.T, bin string, args []string) *agentProcess {
	t.Helper()
	f, err := os.CreateTemp(t.TempDir(), "kerf-agent-*.log")
	require.NoError(t, err)
	a := &agentProcess{cmd: exec.Command(bin, args...), log: f.Name(), done: make(chan error, 1)}
	a.cmd.Stdout, a.cmd.Stderr = f, f
	require.NoError(t, a.cmd.Start())
	go func() { a.done <- a.cmd.Wait(); _ = f.Close() }()
	t.Cleanup(func() { a.stop(t) })
	return a
}

// stop stops the agent (SIGINT; SIGKILL after 10 s), once.
func (a *agentProcess) stop(t *testing.T) {
	if a.cmd.ProcessState != nil || a.done == nil {
		return
	}
	_ = a.cmd.Process.Signal(os.Interrupt)
	select {
	case err := <-a.done:
		if err != nil {
			t.Errorf("kerf-agent exited with %v: %s", err, a.tail())
		}
	case <-time.After(10 * time.Second):
		_ = a.cmd.Process.Kill()
		<-a.done
		t.Errorf("kerf-agent did not stop within 10 s of SIGINT: %s", a.tail())
	}
	a.done = nil
}

func (a *agentProcess) tail() string {
	b, _ := os.ReadFile(a.log)
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// TestOOMKillsWhileLeaderAndAgentWereDownRollBack is issue 16's "nothing
// lost" test, on real parts: a watched memory change whose new pod's
// container is a real v1 memory cgroup (32 MiB limit) tracked by the real
// kerf-agent binary (--oom-source=cgroup) streaming to leader a. Leader a
// stops, then the agent; a child process of the container is OOM-killed
// three times (no restart: pod status never shows them, and no agent runs
// to send an event). The agent is started again, then leader b: the
// restarted agent's stream carries the cgroup's absolute count, 3, and
// leader b rolls memory back with "oomKills 3 ≥ 1" although it received
// no OOM event. Before the stream carried the count, b never rolled back.
func TestOOMKillsWhileLeaderAndAgentWereDownRollBack(t *testing.T) {
	root, mounts := agenttest.Cgroups(t, "kerf-oomabs")
	cp := controlplane.Get(t)
	c, cs := cp.Client, cp.Clientset
	ctx := context.Background()
	ns := kubetest.Namespace(t, c)
	nodeName := kubetest.Node(t, c)
	bin := agenttest.BuildAgent(t)

	opts := cert.Options{Namespace: ns, ServiceName: "kerf-leader", SecretName: "kerf-stream-cert", ExtraHosts: []string{"127.0.0.1"}}
	_, _, caPEM, err := cert.EnsureSelfManaged(ctx, c, opts)
	require.NoError(t, err)
	caFile := filepath.Join(t.TempDir(), "leader-ca.pem")
	require.NoError(t, os.WriteFile(caFile, caPEM, 0o600))
	require.NoError(t, c.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "kerf-agent"}}))
	agentPod := streamtest.CreatePod(t, cs, ns, "kerf-agent-node-1", nodeName, "kerf-agent")
	tokenFile := filepath.Join(t.TempDir(), "token")
	require.NoError(t, os.WriteFile(tokenFile, []byte(streamtest.CreateToken(t, cs, ns, "kerf-agent", "kerf-leader", agentPod)), 0o600))
	leaderConfig := func(sig *signals.Stores, lis net.Listener) cluster.Config {
		return cluster.Config{Signals: sig, Stream: cluster.StreamConfig{Listener: lis, Cert: cert.Source{SelfManaged: opts},
			Audience: "kerf-leader", ServiceAccountNamespace: ns, ServiceAccountName: "kerf-agent"}}
	}

	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := lis.Addr().String()
	sigA := signals.New()
	dep, a := leadertest.WatchedWeb(t, c, ns, kubetest.PolicyWith(ns, time.Hour, nil), leaderConfig(sigA, lis), "250m", "128Mi")
	require.Eventually(t, a.Leading, 15*time.Second, 50*time.Millisecond)

	// The Rollout's new pod, running one container whose cgroup is real.
	pod := kubetest.AdoptedPod(t, c, dep, "web-new-1")
	id := make([]byte, 32)
	_, _ = rand.Read(id)
	containerID := "containerd://" + hex.EncodeToString(id)
	require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(pod), pod))
	pod.Status.QOSClass = corev1.PodQOSGuaranteed
	pod.Status.ContainerStatuses[0].ContainerID = containerID
	require.NoError(t, c.Status().Update(ctx, pod))
	rel, err := cgroup.Layout{Driver: cgroup.DriverCgroupfs, Root: root}.ContainerDir(cgroup.PodCgroup{UID: string(pod.UID), QoS: cgroup.QoSGuaranteed}, containerID)
	require.NoError(t, err)
	var memDir string
	for _, m := range mounts {
		d := kerneltest.MakeCgroupPath(t, m.Path, rel)
		if _, err := os.Stat(filepath.Join(d, "memory.limit_in_bytes")); err == nil {
			memDir = d
		}
	}
	require.NotEmpty(t, memDir, "the container's memory cgroup")
	limit := strconv.Itoa(32 << 20)
	kerneltest.WriteFile(t, memDir, "memory.limit_in_bytes", limit)
	_ = os.WriteFile(filepath.Join(memDir, "memory.memsw.limit_in_bytes"), []byte(limit), 0)

	args := []string{
		"--discovery=apiserver", "--kubeconfig=" + cp.Kubeconfig, "--node-name=" + nodeName,
		"--interval=500ms", "--usage-interval=1s", "--oom-source=cgroup",
		"--cgroup-driver=cgroupfs", "--kubelet-cgroup-root=" + root, "--cgroup-root=" + root + "/kubepods",
		"--leader-addr=" + addr, "--leader-ca=" + caFile, "--token-file=" + tokenFile,
		"--metrics-addr=" + freeport.Addr(t),
	}
	agent := startAgentProcess(t, bin, args)
	counted := func(sig *signals.Stores, kills uint64) func() bool {
		return func() bool {
			got := sig.Kernel.OOMKillCounts(pod.UID, "app")
			return len(got) == 1 && got[0].Kills == kills
		}
	}
	require.Eventually(t, counted(sigA, 0), time.Minute, 100*time.Millisecond,
		"leader a never received the container's OOM kill count; the agent's log: %s", agent.tail())
	// Kills made while no leader runs count from the baseline a leader
	// recorded; a that stopped before writing it would leave b none, and b
	// would take the count it first sees, 3, as the baseline.
	// The baseline is taken by the first evaluation that has the count:
	// the next signal of the pod, or at the latest the watch's recheck
	// (30 s), which a loaded machine may reach late (CI saw 30 s pass).
	// A pod created after T0 needs none: every kill of it counts. This
	// Rollout's new pod is created after appliedAt, and both are whole
	// seconds: it counts as there at T0 only when created in the same
	// second, which a loaded machine may miss (a -count=2 run beside
	// stress-ng did). Either way the three kills must reach b.
	require.Eventually(t, func() bool {
		ch := kubetest.GetRSR(t, c, ns, "web").Status.Change
		return ch != nil && (len(ch.OOMBaselines) == 1 || pod.CreationTimestamp.After(ch.AppliedAt.Time))
	}, 2*time.Minute, 50*time.Millisecond, "leader a never recorded the container's OOM baseline")
	if ch := kubetest.GetRSR(t, c, ns, "web").Status.Change; len(ch.OOMBaselines) == 1 {
		assert.Zero(t, ch.OOMBaselines[0].OOMKills, "no kill before the baseline")
	} else {
		t.Logf("pod created at %s, after T0 %s: its kills count without a baseline", pod.CreationTimestamp, ch.AppliedAt)
	}
	assert.Equal(t, v1alpha1.PhaseWatching, kubetest.GetRSR(t, c, ns, "web").Status.Phase)

	// Leader a goes, then the agent: three kills while neither runs.
	a.Stop()
	err = <-a.Done
	a.Done <- err
	agent.stop(t)
	for range 3 {
		oomKillChild(t, memDir)
	}
	assert.Equal(t, v1alpha1.PhaseWatching, kubetest.GetRSR(t, c, ns, "web").Status.Phase)

	// The agent restarts, then leader b comes, on a's address.
	agent = startAgentProcess(t, bin, args)
	var lisB net.Listener
	require.Eventually(t, func() bool { lisB, err = net.Listen("tcp", addr); return err == nil }, 10*time.Second, 50*time.Millisecond)
	sigB := signals.New()
	b := leadertest.StartReplica(t, ns, "b", leaderConfig(sigB, lisB))
	require.Eventually(t, b.Leading, 30*time.Second, 50*time.Millisecond)
	require.Eventually(t, counted(sigB, 3), time.Minute, 100*time.Millisecond,
		"leader b never received the absolute count 3; the agent's log: %s", agent.tail())

	var rsr *v1alpha1.RightsizingRecommendation
	if !assert.Eventually(t, func() bool {
		rsr = kubetest.GetRSR(t, c, ns, "web")
		return rsr.Status.Phase == v1alpha1.PhaseRolledBack
	}, time.Minute, 100*time.Millisecond) {
		cond := kubetest.Condition(rsr, v1alpha1.ConditionHealthWatch)
		t.Fatalf("never rolled back: %s %s, health watch %+v", rsr.Status.Phase, rsr.Status.Reason, cond)
	}
	assert.Equal(t, v1alpha1.HealthWatchOOMKills, rsr.Status.Reason)
	require.NotNil(t, rsr.Status.Breach)
	assert.Equal(t, []string{"oomKills 3 ≥ 1"}, rsr.Status.Breach.Figures)
	assert.Equal(t, []v1alpha1.ResourceName{"memory"}, rsr.Status.Breach.Resources)
	kills, _ := sigB.Kernel.OOMKills(pod.UID, "app", rsr.Status.Change.AppliedAt.Time, time.Now())
	assert.Zero(t, kills, "leader b received no OOM event: the count alone")
	require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(pod), pod))
	assert.Zero(t, pod.Status.ContainerStatuses[0].RestartCount, "pod status never showed the kills")
}
