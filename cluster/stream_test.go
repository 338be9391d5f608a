package cluster_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	streamv1 "github.com/kerf-dev/kerf/api/stream/v1"
	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/cluster"
	"github.com/kerf-dev/kerf/cluster/cert"
	"github.com/kerf-dev/kerf/cluster/signals"
	"github.com/kerf-dev/kerf/node/report"
	agentstream "github.com/kerf-dev/kerf/node/stream"
	"github.com/kerf-dev/kerf/test/controlplane"
	"github.com/kerf-dev/kerf/test/kubetest"
	"github.com/kerf-dev/kerf/test/leadertest"
	"github.com/kerf-dev/kerf/test/streamtest"
)

// TestOnlyTheLeaderServesTheStream runs two replicas with the stream on:
// the leader answers an agent (here one without a token, which it refuses
// as unauthenticated) and the other replica tells it to go elsewhere.
func TestOnlyTheLeaderServesTheStream(t *testing.T) {
	c := controlplane.Get(t).Client
	ns := kubetest.Namespace(t, c)
	ctx := context.Background()
	serverCert, pool := kubetest.StreamCert(t, c, ns)

	replicas := map[string]*leadertest.Replica{}
	addrs := map[string]string{}
	for _, id := range []string{"a", "b"} {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		addrs[id] = ln.Addr().String()
		replicas[id] = leadertest.StartReplica(t, ns, id, cluster.Config{Stream: cluster.StreamConfig{Listener: ln, Cert: serverCert,
			Audience: "kerf-leader", ServiceAccountNamespace: ns, ServiceAccountName: "kerf-agent"}})
		if id == "a" {
			require.Eventually(t, replicas[id].Leading, 15*time.Second, 50*time.Millisecond)
		}
	}

	connect := func(addr string) codes.Code {
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12})))
		require.NoError(t, err)
		defer conn.Close()
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		st, err := streamv1.NewStreamClient(conn).Connect(cctx)
		require.NoError(t, err)
		_ = st.Send(&streamv1.AgentMessage{Body: &streamv1.AgentMessage_Hello{Hello: &streamv1.Hello{NodeName: "node-a"}}})
		_, err = st.Recv()
		require.Error(t, err)
		return status.Code(err)
	}
	assert.Equal(t, codes.Unauthenticated, connect(addrs["a"]), "the leader serves, and refuses an agent without a token")
	assert.Equal(t, codes.Unavailable, connect(addrs["b"]), "a replica that does not lead sends agents elsewhere")
}

// TestTheLeaderSignsTheAgentsMetricsCertificate: an agent that sends a
// certificate request in its Hello (kerf-agent --metrics-tls) gets a
// certificate for its key, signed by the stream's CA, for
// kerf-agent.<namespace>.svc, naming the node its token proved and valid
// for a day; scrapers verify the agent's /metrics with it. A request that
// is not signed by its key closes the stream. Before, the agents' /metrics
// had no certificate to serve TLS with.
func TestTheLeaderSignsTheAgentsMetricsCertificate(t *testing.T) {
	c := controlplane.Get(t).Client
	ns := kubetest.Namespace(t, c)
	s := newAgentStream(t, c, ns)
	l := leadertest.StartReplica(t, ns, "a", cluster.Config{Stream: s.config()})
	require.Eventually(t, l.Leading, 15*time.Second, 50*time.Millisecond)
	runAgent := func(csr []byte, issued func([]byte)) {
		s.run(t, func(cfg *agentstream.Config) { cfg.MetricsCSR, cfg.OnMetricsCertificate = csr, issued })
	}

	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	csr, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject: pkix.Name{CommonName: "asks-for-another-name"}, DNSNames: []string{"kerf-leader." + ns + ".svc"}}, key)
	require.NoError(t, err)
	certs := make(chan []byte, 4)
	runAgent(csr, func(p []byte) { certs <- p })
	var certPEM []byte
	select {
	case certPEM = <-certs:
	case <-time.After(30 * time.Second):
		t.Fatal("no /metrics certificate from the leader")
	}
	block, _ := pem.Decode(certPEM)
	require.NotNil(t, block)
	leaf, err := x509.ParseCertificate(block.Bytes)
	require.NoError(t, err)
	_, err = leaf.Verify(x509.VerifyOptions{Roots: s.pool, DNSName: "kerf-agent." + ns + ".svc", KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
	require.NoError(t, err, "the stream's CA signed it for the agents' name")
	assert.Equal(t, []string{"kerf-agent." + ns + ".svc"}, leaf.DNSNames, "the names are the leader's, not the request's")
	assert.Equal(t, "kerf-agent:"+s.nodeName, leaf.Subject.CommonName, "it names the node the token proved")
	assert.True(t, leaf.PublicKey.(*ecdsa.PublicKey).Equal(key.Public()), "it is for the agent's key")
	assert.WithinDuration(t, time.Now().Add(cluster.AgentMetricsCertificateValidity), leaf.NotAfter, time.Minute)

	// A request whose signature is not its key's: the leader closes the
	// stream rather than sign a key nobody proved to hold.
	forged := append([]byte(nil), csr...)
	forged[len(forged)-5] ^= 0xff
	runAgent(forged, func([]byte) { t.Error("a forged request got a certificate") })
	require.Eventually(t, func() bool {
		return leadertest.MetricValue(t, l, "kerf_stream_errors_total", "reason", "metrics_csr_invalid") >= 1
	}, 30*time.Second, 50*time.Millisecond, "the forged request closes its stream")
	// The node's two agents replace each other's streams: the good one
	// gets a new certificate on each.
	assert.GreaterOrEqual(t, leadertest.MetricValue(t, l, "kerf_stream_metrics_certificates_total", "result", "issued"), 1.0)
}

// agentLeader is a leader serving the agents' stream in ns over TLS, and a
// real node agent's stream.Client connected to it with a projected token of
// the kerf-agent service account bound to an agent pod on the test node.
type agentLeader struct {
	dep      *appsv1.Deployment
	leader   *leadertest.Replica
	agent    *agentstream.Client
	registry *prometheus.Registry
	// signals are the leader's stores, which the agent's reports fill.
	signals *signals.Stores
}

// agentStream is what a leader's agent stream in ns and a real agent's
// client need: the listener and certificate the stream serves, the pool
// that verifies it, the test node, and a projected token of the
// kerf-agent service account bound to an agent pod on that node.
type agentStream struct {
	ns        string
	lis       net.Listener
	cert      cert.Source
	pool      *x509.CertPool
	nodeName  string
	tokenFile string
}

func newAgentStream(t *testing.T, c client.Client, ns string) *agentStream {
	t.Helper()
	cs := controlplane.Get(t).Clientset
	s := &agentStream{ns: ns, nodeName: kubetest.Node(t, c), tokenFile: filepath.Join(t.TempDir(), "token")}
	s.cert, s.pool = kubetest.StreamCert(t, c, ns)
	var err error
	s.lis, err = net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	require.NoError(t, c.Create(context.Background(), &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "kerf-agent"}}))
	agentPod := streamtest.CreatePod(t, cs, ns, "kerf-agent-node-1", s.nodeName, "kerf-agent")
	require.NoError(t, os.WriteFile(s.tokenFile, []byte(streamtest.CreateToken(t, cs, ns, "kerf-agent", "kerf-leader", agentPod)), 0o600))
	return s
}

// config is the leader's StreamConfig that serves it.
func (s *agentStream) config() cluster.StreamConfig {
	return cluster.StreamConfig{Listener: s.lis, Cert: s.cert, Audience: "kerf-leader", ServiceAccountNamespace: s.ns, ServiceAccountName: "kerf-agent"}
}

// run connects a real agent's stream client, set further by mutate (nil:
// as is), until the test ends.
func (s *agentStream) run(t *testing.T, mutate func(*agentstream.Config)) *agentstream.Client {
	t.Helper()
	cfg := agentstream.Config{
		Addr: s.lis.Addr().String(), TLS: &tls.Config{RootCAs: s.pool, MinVersion: tls.VersionTLS12},
		TokenFile: s.tokenFile, NodeName: s.nodeName, MinBackoff: 50 * time.Millisecond, MaxBackoff: 200 * time.Millisecond,
		Registerer: prometheus.NewRegistry(), Log: slog.New(slog.NewTextHandler(streamtest.LogWriter(t), &slog.HandlerOptions{Level: slog.LevelWarn})),
	}
	if mutate != nil {
		mutate(&cfg)
	}
	agent, err := agentstream.NewClient(cfg)
	require.NoError(t, err)
	runCtx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = agent.Run(runCtx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return agent
}

// watchedWebWithAgent is watchedWeb with the stream on and an agent
// connected; it returns once the change is watched and the agent's
// stream is open.
func watchedWebWithAgent(t *testing.T, c client.Client, ns string, p *v1alpha1.RightsizingPolicy) *agentLeader {
	t.Helper()
	s := newAgentStream(t, c, ns)
	sig := signals.New()
	dep, l := leadertest.WatchedWeb(t, c, ns, p, cluster.Config{Signals: sig, Stream: s.config()}, "250m", "128Mi")
	require.Eventually(t, l.Leading, 15*time.Second, 50*time.Millisecond)

	reg := prometheus.NewRegistry()
	agent := s.run(t, func(cfg *agentstream.Config) { cfg.Registerer = reg })
	require.Eventually(t, func() bool { return agent.State() == agentstream.Connected }, 15*time.Second, 20*time.Millisecond)
	return &agentLeader{dep: dep, leader: l, agent: agent, registry: reg, signals: sig}
}

// agentSees is what the agent's pod discovery reports when the kubelet's
// Pods API shows the app container of pod restarted for the n-th time,
// after a run that ended with reason (none when empty).
func agentSees(pod *corev1.Pod, n int32, reason, runID string, finished time.Time) report.ContainerEvent {
	ev := report.ContainerEvent{Namespace: pod.Namespace, Pod: pod.Name, PodUID: string(pod.UID), Container: "app", RestartCount: n}
	if reason != "" {
		ev.Terminated = &corev1.ContainerStateTerminated{Reason: reason, ExitCode: 137, ContainerID: runID,
			StartedAt: metav1.NewTime(finished.Add(-time.Second)), FinishedAt: metav1.NewTime(finished)}
	}
	return ev
}

// TestAgentRestartsRollBackBeforePodStatus sends restarts the way the
// agent sees them in the kubelet's Pods API, through a real stream: the
// leader rolls back every touched resource while the apiserver's pod
// status still shows no restart.
func TestAgentRestartsRollBackBeforePodStatus(t *testing.T) {
	c := controlplane.Get(t).Client
	ns := kubetest.Namespace(t, c)
	ctx := context.Background()
	a := watchedWebWithAgent(t, c, ns, kubetest.PolicyWith(ns, time.Hour, func(g *v1alpha1.RollbackGuardrails) { g.OOMKills = ptr.To[int32](5) }))
	pod := kubetest.AdoptedPod(t, c, a.dep, "web-new-1")
	time.Sleep(200 * time.Millisecond) // the pod reaches the leader's cache

	finished := time.Now()
	sent := time.Now()
	for n := int32(1); n <= 3; n++ {
		a.agent.ContainerEvent(agentSees(pod, n, "Error", fmt.Sprintf("containerd://run-%d", n), finished))
	}
	rsr := kubetest.WaitPhase(t, c, ns, "web", v1alpha1.PhaseRolledBack, v1alpha1.HealthWatchRestarts)
	t.Logf("agent container events → RolledBack seen by the test: %v (pod status: never)", time.Since(sent))
	require.NotNil(t, rsr.Status.Breach)
	assert.Contains(t, rsr.Status.Breach.Figures, "restarts 3 ≥ 3")
	assert.Equal(t, []v1alpha1.ResourceName{"cpu", "memory"}, rsr.Status.Breach.Resources)
	require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(pod), pod))
	assert.Zero(t, pod.Status.ContainerStatuses[0].RestartCount, "pod status never showed a restart")
	require.Eventually(t, func() bool {
		rsr = kubetest.GetRSR(t, c, ns, "web")
		return rsr.Status.Breach.Restored
	}, 20*time.Second, 50*time.Millisecond)
	res := kubetest.TemplateResources(t, c, a.dep)
	assert.Equal(t, "500m", res.Requests.Cpu().String())
	assert.Equal(t, "256Mi", res.Requests.Memory().String())
}

// TestAgentOOMKilledTerminationRollsBackMemoryBeforePodStatus sends one
// termination with reason OOMKilled as the agent sees it: the leader rolls
// back memory while the apiserver's pod status shows nothing, and no
// kernel OOM event was sent (--oom-source=off on the node, say).
func TestAgentOOMKilledTerminationRollsBackMemoryBeforePodStatus(t *testing.T) {
	c := controlplane.Get(t).Client
	ns := kubetest.Namespace(t, c)
	ctx := context.Background()
	a := watchedWebWithAgent(t, c, ns, kubetest.PolicyWith(ns, time.Hour, nil))
	pod := kubetest.AdoptedPod(t, c, a.dep, "web-new-1")
	time.Sleep(200 * time.Millisecond)

	sent := time.Now()
	a.agent.ContainerEvent(agentSees(pod, 1, "OOMKilled", "containerd://run-1", sent))
	rsr := kubetest.WaitPhase(t, c, ns, "web", v1alpha1.PhaseRolledBack, v1alpha1.HealthWatchOOMKills)
	t.Logf("agent OOMKilled termination → RolledBack seen by the test: %v (pod status: never)", time.Since(sent))
	assert.Equal(t, []string{"oomKills 1 ≥ 1"}, rsr.Status.Breach.Figures)
	assert.Equal(t, []v1alpha1.ResourceName{"memory"}, rsr.Status.Breach.Resources)
	cond := kubetest.Condition(rsr, v1alpha1.ConditionHealthWatch)
	require.NotNil(t, cond)
	assert.Contains(t, cond.Message, "oomKills 1 ≥ 1 (pod web-new-1 container app: 1 (status, 1 seen by the agent ahead of pod status; no kernel data))")
	require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(pod), pod))
	assert.Nil(t, pod.Status.ContainerStatuses[0].LastTerminationState.Terminated, "pod status never showed the kill")
	require.Eventually(t, func() bool {
		rsr = kubetest.GetRSR(t, c, ns, "web")
		return rsr.Status.Breach.Restored
	}, 20*time.Second, 50*time.Millisecond)
	res := kubetest.TemplateResources(t, c, a.dep)
	assert.Equal(t, "256Mi", res.Requests.Memory().String(), "memory restored")
	assert.Equal(t, "250m", res.Requests.Cpu().String(), "cpu, not breached, stays applied")
}

// TestPodStatusCatchingUpWithTheAgentCountsOnce sends a restart after an
// OOM kill through the agent, then writes the same restart and
// termination into pod status as the kubelet would a moment later: with
// thresholds of two, counting either twice would roll back. A second kill
// the agent sees then breaches both signals with counts of exactly two.
func TestPodStatusCatchingUpWithTheAgentCountsOnce(t *testing.T) {
	c := controlplane.Get(t).Client
	ns := kubetest.Namespace(t, c)
	ctx := context.Background()
	a := watchedWebWithAgent(t, c, ns, kubetest.PolicyWith(ns, time.Hour, func(g *v1alpha1.RollbackGuardrails) {
		g.OOMKills, g.Restarts = ptr.To[int32](2), ptr.To[int32](2)
	}))
	pod := kubetest.AdoptedPod(t, c, a.dep, "web-new-1")
	time.Sleep(200 * time.Millisecond)

	// A termination counts when it finished after T0, which has
	// one-second resolution: wait for the next second. The Pods API shows
	// times finer than the apiserver's seconds.
	time.Sleep(time.Until(time.Now().Truncate(time.Second).Add(time.Second)))
	first := time.Now()
	a.agent.ContainerEvent(agentSees(pod, 1, "OOMKilled", "containerd://run-1", first))
	require.Eventually(t, func() bool { return a.acknowledged(t) }, 10*time.Second, 20*time.Millisecond)
	time.Sleep(500 * time.Millisecond) // the leader evaluates on the signal
	assert.Equal(t, v1alpha1.PhaseWatching, kubetest.GetRSR(t, c, ns, "web").Status.Phase, "one restart and one kill of two allowed")

	require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(pod), pod))
	cs := &pod.Status.ContainerStatuses[0]
	cs.RestartCount = 1
	cs.LastTerminationState = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Reason: "OOMKilled", ExitCode: 137,
		ContainerID: "containerd://run-1", StartedAt: metav1.NewTime(first.Add(-time.Second)), FinishedAt: metav1.NewTime(first)}}
	require.NoError(t, c.Status().Update(ctx, pod))
	time.Sleep(time.Second) // the leader sees the pod update and evaluates
	assert.Equal(t, v1alpha1.PhaseWatching, kubetest.GetRSR(t, c, ns, "web").Status.Phase, "one restart and one kill, each counted once")

	second := time.Now()
	a.agent.ContainerEvent(agentSees(pod, 2, "OOMKilled", "containerd://run-2", second))
	rsr := kubetest.WaitPhase(t, c, ns, "web", v1alpha1.PhaseRolledBack, v1alpha1.HealthWatchRestarts)
	assert.Equal(t, []string{"restarts 2 ≥ 2", "oomKills 2 ≥ 2"}, rsr.Status.Breach.Figures)
}

// acknowledged reports whether the leader acknowledged every container
// event the agent sent: it has stored them and signalled their pods.
func (a *agentLeader) acknowledged(t *testing.T) bool {
	t.Helper()
	mfs, err := a.registry.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() == "kerf_agent_stream_buffered_container_events" {
			return mf.GetMetric()[0].GetGauge().GetValue() == 0
		}
	}
	return false
}

// TestAgentsUsageReachesTheLeadersStore: the usage an agent streams with
// its counters lands in the leader's usage store, which the recommender
// reads (the leader wires the store into its stream server).
func TestAgentsUsageReachesTheLeadersStore(t *testing.T) {
	c := controlplane.Get(t).Client
	ns := kubetest.Namespace(t, c)
	al := watchedWebWithAgent(t, c, ns, kubetest.PolicyWith(ns, time.Hour, nil))
	pod := kubetest.AdoptedPod(t, c, al.dep, "web-new")
	key := report.ContainerKey{PodUID: string(pod.UID), Name: "app"}
	al.agent.Counters([]report.Sample{{Key: key, At: time.Now(), Periods: 10, HasUsage: true,
		Usage: report.Usage{CPU: 1500 * time.Millisecond, WorkingSet: 64 << 20, Peak: 80 << 20}}})

	var got signals.UsageSample
	require.Eventually(t, func() bool {
		var ok bool
		got, ok = al.signals.Usage.Latest(pod.UID, "app")
		return ok
	}, 15*time.Second, 20*time.Millisecond, "the leader's usage store never got the agent's reading")
	assert.Equal(t, 1500*time.Millisecond, got.CPU)
	assert.Equal(t, uint64(64<<20), got.WorkingSet)
	assert.Equal(t, uint64(80<<20), got.Peak)
}
