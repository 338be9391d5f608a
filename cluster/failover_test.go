package cluster_test

import (
	"context"
	"crypto/tls"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/cluster"
	"github.com/kerf-dev/kerf/cluster/healthwatch"
	"github.com/kerf-dev/kerf/cluster/signals"
	agentstream "github.com/kerf-dev/kerf/node/stream"
	"github.com/kerf-dev/kerf/test/controlplane"
	"github.com/kerf-dev/kerf/test/kubetest"
	"github.com/kerf-dev/kerf/test/leadertest"
	"github.com/kerf-dev/kerf/test/streamtest"
)

// productionTimings sets kerf-leader's default lease timings (15 s, 10 s,
// 2 s) on cfg, so that a handover costs what it costs in a cluster.
func productionTimings(cfg cluster.Config) cluster.Config {
	cfg.LeaseDuration, cfg.RenewDeadline, cfg.RetryPeriod = 15*time.Second, 10*time.Second, 2*time.Second
	return cfg
}

// writeOOMKill writes, at once, what a kubelet reports after the
// container was OOM-killed and restarted (oomKilled without its wait for
// the next second: the caller makes sure a second has passed since the
// change was applied).
func writeOOMKill(t testing.TB, c client.Client, pod *corev1.Pod) {
	t.Helper()
	ctx := context.Background()
	if err := c.Get(ctx, client.ObjectKeyFromObject(pod), pod); err != nil {
		t.Fatal(err)
	}
	cs := &pod.Status.ContainerStatuses[0]
	cs.RestartCount++
	cs.LastTerminationState = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
		ExitCode: 137, Reason: "OOMKilled", StartedAt: metav1.NewTime(time.Now().Add(-time.Second)), FinishedAt: metav1.Now()}}
	if err := c.Status().Update(ctx, pod); err != nil {
		t.Fatal(err)
	}
}

// handover is one run of a graceful handover during a watch: leader a
// leads and watches web's change, b stands by; a stops as on SIGTERM
// (its context is cancelled) and a pod of the change is OOM-killed at
// once.
type handover struct {
	// stopped is when a's context was cancelled; killed when the OOM kill
	// was written; leading when b held the Lease; rolledBack when the
	// recommendation read RolledBack.
	stopped, killed, leading, rolledBack time.Time
}

// runHandover runs one handover in a fresh namespace, on the lease timings
// of cfg (startLeader's short ones when zero).
func runHandover(t testing.TB, cfg cluster.Config) handover {
	t.Helper()
	c := controlplane.Get(t).Client
	ns := kubetest.Namespace(t, c)
	ctx := context.Background()
	dep := kubetest.Web(t, c, ns, kubetest.PolicyWith(ns, time.Hour, nil))
	a, b := leadertest.Pair(t, ns, cfg, cfg)
	if err := c.Create(ctx, kubetest.Recommendation(ns, "web", "web", v1alpha1.StrategyRollout, "250m", "128Mi")); err != nil {
		t.Fatal(err)
	}
	kubetest.WaitPhase(t, c, ns, "web", v1alpha1.PhaseWatching, "")
	pod := kubetest.AdoptedPod(t, c, dep, "web-new-1")
	// The pod reaches both caches, and the kill lands a second after the
	// change was recorded (status times have one-second resolution).
	time.Sleep(time.Until(time.Now().Truncate(time.Second).Add(1100 * time.Millisecond)))
	if b.Leading() {
		t.Fatal("b leads beside a")
	}

	var h handover
	h.stopped = time.Now()
	a.Stop()
	writeOOMKill(t, c, pod)
	h.killed = time.Now()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		if h.leading.IsZero() && b.Leading() {
			h.leading = time.Now()
		}
		if kubetest.GetRSR(t, c, ns, "web").Status.Phase == v1alpha1.PhaseRolledBack {
			h.rolledBack = time.Now()
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if h.rolledBack.IsZero() {
		t.Fatalf("not rolled back 60 s after the handover (b leading: %v)", b.Leading())
	}
	if h.leading.IsZero() {
		h.leading = h.rolledBack
	}
	leadertest.WaitGracefulStop(t, a)
	return h
}

// BenchmarkOOMRollbackAcrossHandover measures, on a real apiserver and
// kerf-leader's own lease timings (15 s, 10 s, 2 s), what a graceful
// leader handover costs an OOM rollback: two replicas run, a watches a
// change, a stops as on SIGTERM and a pod of the change is OOM-killed at
// once (pod status OOMKilled); the figures are the time from the kill to
// the recommendation reading RolledBack, from a's stop to b leading, and
// from b leading to RolledBack (b's first reconciles).
// It runs handoverRuns handovers per iteration and reports p50 and max.
func BenchmarkOOMRollbackAcrossHandover(b *testing.B) {
	const handoverRuns = 5
	for range b.N {
		var toRollback, toLeading, leadingToRollback []float64
		for range handoverRuns {
			h := runHandover(b, productionTimings(cluster.Config{}))
			toRollback = append(toRollback, float64(h.rolledBack.Sub(h.killed).Milliseconds()))
			toLeading = append(toLeading, float64(h.leading.Sub(h.stopped).Milliseconds()))
			leadingToRollback = append(leadingToRollback, float64(h.rolledBack.Sub(h.leading).Milliseconds()))
		}
		for _, f := range [][]float64{toRollback, toLeading, leadingToRollback} {
			slices.Sort(f)
		}
		n := len(toRollback)
		b.ReportMetric(toRollback[n/2], "p50-ms-to-rollback")
		b.ReportMetric(toRollback[n-1], "max-ms-to-rollback")
		b.ReportMetric(toLeading[n/2], "p50-ms-to-leading")
		b.ReportMetric(toLeading[n-1], "max-ms-to-leading")
		b.ReportMetric(leadingToRollback[n/2], "p50-ms-leading-to-rollback")
		b.Logf("OOM kill -> RolledBack across a graceful handover, %d runs: p50 %.0f ms, max %.0f ms; stop -> standby leading: p50 %.0f ms, max %.0f ms; leading -> RolledBack: p50 %.0f ms, max %.0f ms (all: %v, %v, %v)",
			n, toRollback[n/2], toRollback[n-1], toLeading[n/2], toLeading[n-1], leadingToRollback[n/2], leadingToRollback[n-1],
			toRollback, toLeading, leadingToRollback)
	}
}

// TestStandbyCachesWhatTheLeaderReadsBeforeItLeads runs a standby that
// cannot lead (another holder has the Lease): once it is Ready, its cache
// already has a synced informer for every kind the leader reads, so a
// takeover starts reconciling at once instead of listing them first.
func TestStandbyCachesWhatTheLeaderReadsBeforeItLeads(t *testing.T) {
	c := controlplane.Get(t).Client
	ns := kubetest.Namespace(t, c)
	ctx := context.Background()
	require.NoError(t, c.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "kerf-leader"},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("other"), LeaseDurationSeconds: ptr.To[int32](3600),
			RenewTime: &metav1.MicroTime{Time: time.Now()}}}))
	b := leadertest.StartReplica(t, ns, "b", cluster.Config{})
	require.Eventually(t, func() bool { return cluster.Synced(b.Leader) }, 30*time.Second, 20*time.Millisecond, "the standby never synced its caches")
	require.False(t, b.Leading())
	for _, obj := range cluster.LeaderReads() {
		// Asking for an informer the cache lacks creates it unsynced.
		inf, err := b.Manager().GetCache().GetInformer(ctx, obj, cache.BlockUntilSynced(false))
		require.NoError(t, err)
		assert.True(t, inf.HasSynced(), "the standby had no synced informer for %T", obj)
	}
}

// leaderService stands for the kerf-leader Service: it forwards each
// connection to the replica that leads now (the Service selects the pod
// labeled kerf.dev/leader) and refuses it while none does.
type leaderService struct {
	ln       net.Listener
	replicas map[*leadertest.Replica]string // replica → its stream's address
}

// newLeaderService serves until the test ends.
func newLeaderService(t *testing.T, replicas map[*leadertest.Replica]string) *leaderService {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	s := &leaderService{ln: ln, replicas: replicas}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var open []net.Conn
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range open {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	go func() {
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			var addr string
			for l, a := range s.replicas {
				if l.Leading() {
					addr = a
				}
			}
			out, err := net.Dial("tcp", addr)
			if addr == "" || err != nil {
				in.Close()
				continue
			}
			mu.Lock()
			open = append(open, in, out)
			mu.Unlock()
			wg.Add(2)
			pipe := func(dst, src net.Conn) {
				defer wg.Done()
				_, _ = io.Copy(dst, src)
				dst.Close()
				src.Close()
			}
			go pipe(out, in)
			go pipe(in, out)
		}
	}()
	return s
}

// TestGracefulHandoverHandsTheAgentsEventsToTheNextLeader stops the leader
// as on SIGTERM while an agent streams to it through the Service, and the
// agent reports an OOM-killed container at that moment: the stopping
// leader acknowledges nothing it would no longer act on, so the agent
// keeps the event, reconnects to the new leader and that one rolls back
// (pod status never shows the kill).
func TestGracefulHandoverHandsTheAgentsEventsToTheNextLeader(t *testing.T) {
	c := controlplane.Get(t).Client
	ns := kubetest.Namespace(t, c)
	ctx := context.Background()
	cs := controlplane.Get(t).Clientset
	nodeName := kubetest.Node(t, c)
	serverCert, pool := kubetest.StreamCert(t, c, ns)
	require.NoError(t, c.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "kerf-agent"}}))
	agentPod := streamtest.CreatePod(t, cs, ns, "kerf-agent-node-1", nodeName, "kerf-agent")
	tokenFile := filepath.Join(t.TempDir(), "token")
	require.NoError(t, os.WriteFile(tokenFile, []byte(streamtest.CreateToken(t, cs, ns, "kerf-agent", "kerf-leader", agentPod)), 0o600))

	dep := kubetest.Web(t, c, ns, kubetest.PolicyWith(ns, time.Hour, nil))
	replicas := map[*leadertest.Replica]string{}
	var a, b *leadertest.Replica
	for _, id := range []string{"a", "b"} {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		l := leadertest.StartReplica(t, ns, id, cluster.Config{Stream: cluster.StreamConfig{Listener: ln, Cert: serverCert,
			Audience: "kerf-leader", ServiceAccountNamespace: ns, ServiceAccountName: "kerf-agent"}})
		replicas[l] = ln.Addr().String()
		if id == "a" {
			a = l
			require.Eventually(t, a.Leading, 15*time.Second, 20*time.Millisecond)
		} else {
			b = l
		}
	}
	svc := newLeaderService(t, replicas)
	agent, err := agentstream.NewClient(agentstream.Config{
		Addr: svc.ln.Addr().String(), TLS: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12},
		TokenFile: tokenFile, NodeName: nodeName, MinBackoff: 50 * time.Millisecond, MaxBackoff: 200 * time.Millisecond,
		Registerer: prometheus.NewRegistry(), Log: slog.New(slog.NewTextHandler(streamtest.LogWriter(t), &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	require.NoError(t, err)
	runCtx, cancel := context.WithCancel(ctx)
	agentDone := make(chan struct{})
	go func() { _ = agent.Run(runCtx); close(agentDone) }()
	t.Cleanup(func() { cancel(); <-agentDone })
	require.Eventually(t, func() bool { return agent.State() == agentstream.Connected }, 15*time.Second, 20*time.Millisecond)

	require.NoError(t, c.Create(ctx, kubetest.Recommendation(ns, "web", "web", v1alpha1.StrategyRollout, "250m", "128Mi")))
	kubetest.WaitPhase(t, c, ns, "web", v1alpha1.PhaseWatching, "")
	pod := kubetest.AdoptedPod(t, c, dep, "web-new-1")
	time.Sleep(time.Until(time.Now().Truncate(time.Second).Add(1100 * time.Millisecond)))

	a.Stop()
	agent.ContainerEvent(agentSees(pod, 1, "OOMKilled", "containerd://run-1", time.Now()))
	rsr := kubetest.WaitPhase(t, c, ns, "web", v1alpha1.PhaseRolledBack, v1alpha1.HealthWatchOOMKills)
	assert.True(t, b.Leading(), "b rolled back")
	assert.Equal(t, []string{"oomKills 1 ≥ 1"}, rsr.Status.Breach.Figures)
	require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(pod), pod))
	assert.Nil(t, pod.Status.ContainerStatuses[0].LastTerminationState.Terminated, "pod status never showed the kill")
	leadertest.WaitGracefulStop(t, a)
}

// leaderPod creates the pod of a leader replica, as the Deployment would.
func leaderPod(t *testing.T, c client.Client, ns, name string) *corev1.Pod {
	t.Helper()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "leader", Image: "kerf.local/kerf-leader:dev"}}}}
	require.NoError(t, c.Create(context.Background(), pod))
	return pod
}

// labeled reports whether the pod carries LeaderPodLabel.
func labeled(t *testing.T, c client.Client, pod *corev1.Pod) bool {
	t.Helper()
	var got corev1.Pod
	require.NoError(t, c.Get(context.Background(), client.ObjectKeyFromObject(pod), &got))
	return got.Labels[cluster.LeaderPodLabel] == "true"
}

// TestAStoppingLeaderHandsOverBeforeItReleasesTheLease stops the leader
// while one of its reconciles is still running (the manager waits for it
// before releasing the Lease): already then it no longer leads and its pod
// has lost kerf.dev/leader, so the Service sends the agents nowhere stale.
// Once the reconcile ends the Lease is released and the standby labels its
// own pod.
func TestAStoppingLeaderHandsOverBeforeItReleasesTheLease(t *testing.T) {
	c := controlplane.Get(t).Client
	ns := kubetest.Namespace(t, c)
	ctx := context.Background()
	kubetest.Web(t, c, ns, kubetest.NamespacedPolicy(ns, false))
	podA, podB := leaderPod(t, c, ns, "kerf-leader-a"), leaderPod(t, c, ns, "kerf-leader-b")
	inReconcile, finish := make(chan struct{}), make(chan struct{})
	var once, finishOnce sync.Once
	release := func() { finishOnce.Do(func() { close(finish) }) }
	a := leadertest.StartReplica(t, ns, "a", cluster.Config{PodName: podA.Name, AfterRecord: func(context.Context, *v1alpha1.RightsizingRecommendation) {
		once.Do(func() { close(inReconcile) })
		<-finish
	}})
	require.Eventually(t, a.Leading, 15*time.Second, 20*time.Millisecond)
	require.Eventually(t, func() bool { return labeled(t, c, podA) }, 10*time.Second, 20*time.Millisecond, "the leader never labeled its pod")
	b := leadertest.StartReplica(t, ns, "b", cluster.Config{PodName: podB.Name})
	t.Cleanup(release) // runs before the leaders' cleanups: a failed assertion does not hold a's stop
	require.NoError(t, c.Create(ctx, kubetest.Recommendation(ns, "web", "web", v1alpha1.StrategyRollout, "250m", "256Mi")))
	select {
	case <-inReconcile:
	case <-time.After(30 * time.Second):
		t.Fatal("a never recorded the change")
	}

	a.Stop()
	require.Eventually(t, func() bool { return !labeled(t, c, podA) }, 5*time.Second, 20*time.Millisecond,
		"the stopping leader kept its label")
	assert.False(t, a.Leading(), "a stopping replica does not lead")
	lease := &coordinationv1.Lease{}
	require.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "kerf-leader"}, lease))
	assert.Equal(t, "a", ptr.Deref(lease.Spec.HolderIdentity, ""), "a keeps the Lease while its reconcile runs")
	assert.False(t, b.Leading())

	release()
	require.Eventually(t, b.Leading, 15*time.Second, 20*time.Millisecond, "b never took over")
	require.Eventually(t, func() bool { return labeled(t, c, podB) && !labeled(t, c, podA) }, 10*time.Second, 20*time.Millisecond,
		"the new leader's pod is not the one labeled")
	kubetest.WaitApplied(t, c, ns, "web") // b finishes a's change
}

// TestOOMBaselinesSurviveFailover: an InPlace memory change of a pod that
// ran at T0, whose container had been OOM-killed twice before (the
// kernel's count is cumulative). Leader a records that count, 2, in
// status.change.oomBaselines and stays Watching; leader b takes over with
// a store that holds only the count the agent sends it after three more
// kills (5, no OOM event): from a's baseline that is 3 kills since the
// change, and b rolls memory back. Without the recorded baseline b would
// take 5 for the count at T0 and count none.
func TestOOMBaselinesSurviveFailover(t *testing.T) {
	c := controlplane.Get(t).Client
	ns := kubetest.Namespace(t, c)
	ctx := context.Background()
	srcA, srcB := signals.NewKernel(), signals.NewKernel()
	dep := kubetest.Web(t, c, ns, kubetest.PolicyWith(ns, time.Hour, nil))
	pod := kubetest.RunningPod(t, c, dep)
	a, b := leadertest.Pair(t, ns, cluster.Config{Signals: kubetest.KernelOnly(srcA)}, cluster.Config{Signals: kubetest.KernelOnly(srcB)})
	require.NoError(t, c.Create(ctx, kubetest.Recommendation(ns, "web", "web", v1alpha1.StrategyInPlace, "500m", "128Mi")))
	kubetest.KubeletReports(t, c, pod, "")
	kubetest.WaitPhase(t, c, ns, "web", v1alpha1.PhaseWatching, "")
	started := time.Now().Add(-time.Hour).Truncate(time.Second) // the instance that ran at T0
	sample := func(kills uint64) healthwatch.CounterSample {
		return healthwatch.CounterSample{PodUID: pod.UID, Container: "app", Started: started, At: time.Now(), Periods: 10,
			OOMKills: kills, HasOOMKills: true}
	}

	srcA.AddSamples(sample(2))
	rsr := kubetest.WaitRSR(t, c, ns, "web", func(rsr *v1alpha1.RightsizingRecommendation) bool {
		return len(rsr.Status.Change.OOMBaselines) > 0
	}, "a never recorded the OOM baselines")
	require.Len(t, rsr.Status.Change.OOMBaselines, 1)
	base := rsr.Status.Change.OOMBaselines[0]
	require.NotNil(t, base.StartedAt)
	assert.True(t, base.StartedAt.Time.Equal(started))
	assert.Equal(t, []any{pod.Name, string(pod.UID), "app", int64(2)}, []any{base.Pod, base.PodUID, base.Container, base.OOMKills})
	require.Equal(t, v1alpha1.PhaseWatching, rsr.Status.Phase, "kills before the change are no breach")

	leadertest.FailOver(t, a, b)
	srcB.AddSamples(sample(5))
	rsr = kubetest.WaitPhase(t, c, ns, "web", v1alpha1.PhaseRolledBack, v1alpha1.HealthWatchOOMKills)
	require.NotNil(t, rsr.Status.Breach)
	assert.Equal(t, []string{"oomKills 3 ≥ 1"}, rsr.Status.Breach.Figures, "from a's baseline")
	assert.Equal(t, []v1alpha1.ResourceName{"memory"}, rsr.Status.Breach.Resources)
}

// TestThrottlingWindowSurvivesFailover fails the leader over at T0+3m,
// during a throttling window: leader a saw the counters at the window's
// start (T0+2m) and records them in status.change.throttlingBaselines;
// leader b, whose store holds only what the agents sent it after T0+3m,
// continues the window from them. Without the baselines b would start the
// window at its own first sample: 120 periods, too few to evaluate, and no
// rollback; with them the window holds 320 periods, 150 throttled (0.46 ≥
// 0.25), and b rolls cpu back.
func TestThrottlingWindowSurvivesFailover(t *testing.T) {
	c := controlplane.Get(t).Client
	ns := kubetest.Namespace(t, c)
	var offset atomic.Int64
	now := func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
	srcA, srcB := signals.NewKernel(), signals.NewKernel()
	dep, a := leadertest.WatchedWeb(t, c, ns, kubetest.PolicyWith(ns, time.Hour, nil), cluster.Config{Now: now, Signals: kubetest.KernelOnly(srcA), Throttling: srcA}, "250m", "256Mi")
	b := leadertest.StartReplica(t, ns, "b", cluster.Config{Now: now, Signals: kubetest.KernelOnly(srcB), Throttling: srcB})
	t0 := kubetest.GetRSR(t, c, ns, "web").Status.Change.AppliedAt.Time
	pod := kubetest.AdoptedPod(t, c, dep, "web-new-1")
	time.Sleep(200 * time.Millisecond) // the pod reaches both caches

	// a, at T0+2m40s: the window opened with 100 periods, 10 throttled;
	// 150 periods since are too few to evaluate.
	w := t0.Add(healthwatch.ThrottlingDelay)
	offset.Store(int64(throttlingFailoverAt - 20*time.Second))
	sample := func(at time.Duration, periods, throttled uint64) healthwatch.CounterSample {
		return healthwatch.CounterSample{PodUID: pod.UID, Container: "app", Started: t0, At: t0.Add(at), Periods: periods, Throttled: throttled}
	}
	srcA.AddSamples(sample(healthwatch.ThrottlingDelay-time.Second, 100, 10), sample(healthwatch.ThrottlingDelay+30*time.Second, 250, 100))
	rsr := kubetest.WaitRSR(t, c, ns, "web", func(rsr *v1alpha1.RightsizingRecommendation) bool {
		return len(rsr.Status.Change.ThrottlingBaselines) > 0
	}, "a never recorded the throttling baselines")
	require.Len(t, rsr.Status.Change.ThrottlingBaselines, 1)
	base := rsr.Status.Change.ThrottlingBaselines[0]
	assert.Equal(t, v1alpha1.ThrottlingBaseline{Pod: pod.Name, PodUID: string(pod.UID), Container: "app", Periods: 100, Throttled: 10,
		At: base.At}, base)
	assert.False(t, base.At.After(w), "baseline at %s, want the sample at or before T0+2m (%s)", base.At, w)
	require.Equal(t, v1alpha1.PhaseWatching, rsr.Status.Phase, "a must not decide on 150 periods")

	// Failover at T0+3m: b takes over with a store that starts now.
	offset.Store(int64(throttlingFailoverAt))
	leadertest.FailOver(t, a, b)
	srcB.AddSamples(sample(throttlingFailoverAt-time.Second, 300, 150), sample(throttlingFailoverAt+5*time.Second, 420, 160))
	offset.Store(int64(throttlingFailoverAt + 10*time.Second))
	srcB.AddSamples(sample(throttlingFailoverAt+6*time.Second, 420, 160))

	rsr = kubetest.WaitPhase(t, c, ns, "web", v1alpha1.PhaseRolledBack, v1alpha1.HealthWatchThrottling)
	require.NotNil(t, rsr.Status.Breach)
	require.NotEmpty(t, rsr.Status.Breach.Figures)
	assert.Contains(t, rsr.Status.Breach.Figures[0], "throttlingRatio 0.46 ≥ 0.25 (container app, 320 periods)",
		"b's window starts at T0+2m from a's baseline, not at its own first sample")
	rsr = kubetest.WaitRestored(t, c, ns, "web")
	assert.Equal(t, []v1alpha1.ResourceName{"cpu"}, rsr.Status.Breach.Resources)
}

// throttlingFailoverAt is when TestThrottlingWindowSurvivesFailover fails
// the leader over: T0+3m, a minute into the throttling window.
const throttlingFailoverAt = 3 * time.Minute
