package node

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	streamv1 "github.com/kerf-dev/kerf/api/stream/v1"
	"github.com/kerf-dev/kerf/cluster/healthwatch"
	"github.com/kerf-dev/kerf/cluster/signals"
	"github.com/kerf-dev/kerf/cluster/stream"
	"github.com/kerf-dev/kerf/node/oom"
	"github.com/kerf-dev/kerf/test/controlplane"
	"github.com/kerf-dev/kerf/test/streamtest"
)

const streamTestNamespace = "kerf-system"

// leaderFixture is what the leader's stream servers of a test share: a
// real apiserver with the agent's service account, an agent pod and an app
// pod on node-a, the agent's bound token in a file, and a TLS identity.
type leaderFixture struct {
	cs        kubernetes.Interface
	pods      stream.Pods
	serverTLS *tls.Config
	clientTLS *tls.Config
	tokenFile string
	app       types.UID
	// stops stop the clients, in the order started.
	stops []func()
}

func newLeaderFixture(t *testing.T) *leaderFixture {
	t.Helper()
	cp := controlplane.StartForTest(t)
	cs := cp.Clientset
	ctx := t.Context()
	_, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: streamTestNamespace}}, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = cs.CoreV1().ServiceAccounts(streamTestNamespace).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "kerf-agent"}}, metav1.CreateOptions{})
	require.NoError(t, err)
	agent := streamtest.CreatePod(t, cs, streamTestNamespace, "kerf-agent-a", "node-a", "kerf-agent")
	app := streamtest.CreatePod(t, cs, streamTestNamespace, "app-a", "node-a", "")

	token := streamtest.CreateToken(t, cs, streamTestNamespace, "kerf-agent", "kerf-leader", agent)
	tokenFile := filepath.Join(t.TempDir(), "token")
	require.NoError(t, os.WriteFile(tokenFile, []byte(token), 0o600))

	factory := informers.NewSharedInformerFactory(cs, 0)
	informer := factory.Core().V1().Pods().Informer()
	pods, err := stream.NewPodIndex(informer)
	require.NoError(t, err)
	stop := make(chan struct{})
	factory.Start(stop)
	t.Cleanup(func() { close(stop); factory.Shutdown() })
	require.True(t, cache.WaitForCacheSync(ctx.Done(), informer.HasSynced))

	serverTLS, pool := streamtest.SelfSigned(t)
	return &leaderFixture{
		cs:        cs,
		pods:      pods,
		serverTLS: serverTLS,
		clientTLS: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS13},
		tokenFile: tokenFile,
		app:       app.UID,
	}
}

// leader is one running leader stream server.
type leader struct {
	memory   *signals.Kernel
	statuses *signals.AgentStatuses
	grpc     *grpc.Server
	addr     string
	reg      *prometheus.Registry
}

// resent returns the leader's kerf_stream_oom_events_resent_total.
func (l *leader) resent(t *testing.T) float64 {
	t.Helper()
	return l.counter(t, "kerf_stream_oom_events_resent_total", "")
}

// counter returns the value of a leader's counter, of the series whose
// only label has value label ("" for a counter without labels); 0 when
// absent.
func (l *leader) counter(t *testing.T, name, label string) float64 {
	t.Helper()
	mfs, err := l.reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if len(m.GetLabel()) == 0 && label == "" || len(m.GetLabel()) == 1 && m.GetLabel()[0].GetValue() == label {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// start runs a leader's stream server with a new signals.Kernel on addr
// ("127.0.0.1:0" for any port).
func (f *leaderFixture) start(t *testing.T, addr string) *leader {
	t.Helper()
	return f.startReplica(t, addr, func() bool { return true })
}

// startReplica runs a leader replica's stream server that serves while
// leading says so, as kerf-leader does with its Lease.
func (f *leaderFixture) startReplica(t *testing.T, addr string, leading func() bool) *leader {
	t.Helper()
	memory := signals.NewKernel(signals.WithCompaction(signals.DefaultRecent))
	statuses := signals.NewAgentStatuses(0)
	reg := prometheus.NewRegistry()
	srv, err := stream.New(stream.Config{
		Audience:                "kerf-leader",
		ServiceAccountNamespace: streamTestNamespace,
		ServiceAccountName:      "kerf-agent",
		Clientset:               f.cs,
		Pods:                    f.pods,
		Kernel:                  memory,
		Statuses:                statuses,
		Leading:                 leading,
		Registerer:              reg,
		Log:                     slog.New(slog.NewTextHandler(streamtest.LogWriter(t), nil)),
	})
	require.NoError(t, err)
	g := stream.NewGRPCServer(srv, f.serverTLS)
	lis, err := net.Listen("tcp", addr)
	require.NoError(t, err)
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)
	return &leader{memory: memory, statuses: statuses, grpc: g, addr: lis.Addr().String(), reg: reg}
}

// client returns a running stream client for addr; it stops with t.
func (f *leaderFixture) client(t *testing.T, addr string, maxOOM int) *StreamClient {
	t.Helper()
	c, err := NewStreamClient(StreamConfig{
		Addr:           addr,
		TLS:            f.clientTLS,
		TokenFile:      f.tokenFile,
		NodeName:       "node-a",
		OOMSource:      oom.KindCgroup,
		MaxBufferedOOM: maxOOM,
		MinBackoff:     50 * time.Millisecond,
		MaxBackoff:     200 * time.Millisecond,
		Registerer:     prometheus.NewRegistry(),
		Log:            slog.New(slog.NewTextHandler(streamtest.LogWriter(t), nil)),
	})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { _ = c.Run(ctx); close(done) }()
	t.Cleanup(func() { <-done })
	f.stops = append(f.stops, func() { cancel(); <-done })
	return c
}

// latestSample returns the newest sample of the app container, and false
// when there is none.
func latestSample(m *signals.Kernel, pod types.UID) (healthwatch.CounterSample, bool) {
	now := time.Now()
	ss, _ := m.Samples([]types.UID{pod}, now.Add(-time.Hour), now.Add(time.Hour))
	if len(ss) == 0 {
		return healthwatch.CounterSample{}, false
	}
	return ss[len(ss)-1], true
}

func kills(m *signals.Kernel, pod types.UID, container string) int {
	now := time.Now()
	n, _ := m.OOMKills(pod, container, now.Add(-time.Hour), now.Add(time.Hour))
	return n
}

// monoNow returns CLOCK_MONOTONIC, the clock of kernel timestamps.
func monoNow(t *testing.T) uint64 {
	var ts unix.Timespec
	require.NoError(t, unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts))
	return uint64(ts.Nano())
}

const (
	eventually = 10 * time.Second
	tick       = 20 * time.Millisecond
)

func TestStreamClientAgainstTheLeader(t *testing.T) {
	f := newLeaderFixture(t)
	app := string(f.app)
	key := ContainerKey{PodUID: app, Name: "app"}

	t.Run("CountersArriveWithTheirValues", func(t *testing.T) {
		l := f.start(t, "127.0.0.1:0")
		c := f.client(t, l.addr, 0)
		c.Counters([]Sample{{Key: key, At: time.Now(), Periods: 100, Throttled: 10, ThrottledTime: time.Second}})
		require.Eventually(t, func() bool {
			s, ok := latestSample(l.memory, f.app)
			return ok && s.Periods == 100 && s.Throttled == 10
		}, eventually, tick)
		assert.Equal(t, StreamConnected, c.State())

		// A later pass is sent as increments; the leader adds them up.
		c.Counters([]Sample{{Key: key, At: time.Now(), Periods: 150, Throttled: 25, ThrottledTime: 2 * time.Second}})
		require.Eventually(t, func() bool {
			s, ok := latestSample(l.memory, f.app)
			return ok && s.Periods == 150 && s.Throttled == 25
		}, eventually, tick)
		assert.Equal(t, 2.0, testutil.ToFloat64(c.sent))

		// Counters going back mean a restarted container: a new index
		// with absolute values, not a (refused) negative increment.
		c.Counters([]Sample{{Key: key, At: time.Now(), Periods: 5, Throttled: 1}})
		require.Eventually(t, func() bool {
			s, ok := latestSample(l.memory, f.app)
			return ok && s.Periods == 5 && s.Throttled == 1
		}, eventually, tick)
		assert.Equal(t, StreamConnected, c.State(), "the leader kept the stream open")
	})

	t.Run("OOMKillArrivesOnceAndIsAcknowledged", func(t *testing.T) {
		l := f.start(t, "127.0.0.1:0")
		c := f.client(t, l.addr, 0)
		c.OOM(oom.Kill{Source: "cgroup", KernelNS: monoNow(t), PID: 42, Comm: "app", Count: 1}, app, "app")
		require.Eventually(t, func() bool { return c.bufferedOOM() == 0 }, eventually, tick, "the ack empties the buffer")
		assert.Equal(t, 1, kills(l.memory, f.app, "app"))
		time.Sleep(200 * time.Millisecond)
		assert.Equal(t, 1, kills(l.memory, f.app, "app"), "the kill is not sent again")
	})

	t.Run("BuffersWhileTheLeaderIsDownAndDrainsOnReconnect", func(t *testing.T) {
		l := f.start(t, "127.0.0.1:0")
		c := f.client(t, l.addr, 0)
		c.Counters([]Sample{{Key: key, At: time.Now(), Periods: 100, Throttled: 10}})
		require.Eventually(t, func() bool { _, ok := latestSample(l.memory, f.app); return ok }, eventually, tick)

		l.grpc.Stop()
		require.Eventually(t, func() bool { return c.State() != StreamConnected }, eventually, tick)
		c.Counters([]Sample{{Key: key, At: time.Now(), Periods: 200, Throttled: 20}})
		c.OOM(oom.Kill{Source: "cgroup", Count: 1}, app, "app")
		c.Counters([]Sample{{Key: key, At: time.Now(), Periods: 300, Throttled: 30}})
		time.Sleep(300 * time.Millisecond) // a few failed reconnects
		assert.Equal(t, 1, c.bufferedOOM(), "the OOM event is kept")

		l2 := f.start(t, l.addr)
		require.Eventually(t, func() bool { return c.bufferedOOM() == 0 }, eventually, tick)
		assert.Equal(t, 1, kills(l2.memory, f.app, "app"))
		require.Eventually(t, func() bool {
			s, ok := latestSample(l2.memory, f.app)
			return ok && s.Periods == 300 && s.Throttled == 30
		}, eventually, tick)
		now := time.Now()
		ss, err := l2.memory.Samples([]types.UID{f.app}, now.Add(-time.Hour), now.Add(time.Hour))
		require.NoError(t, err)
		assert.Len(t, ss, 1, "the newest counters won: only they were sent")
		assert.Equal(t, StreamConnected, c.State())
	})

	t.Run("BufferKeepsTheNewestOOMEventsAndCountsDrops", func(t *testing.T) {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		addr := lis.Addr().String()
		require.NoError(t, lis.Close())

		c := f.client(t, addr, 3)
		containers := []string{"c1", "c2", "c3", "c4", "c5"}
		for _, name := range containers {
			c.OOM(oom.Kill{Source: "cgroup", Count: 1}, app, name)
		}
		assert.Equal(t, 3, c.bufferedOOM())
		assert.Equal(t, 2.0, testutil.ToFloat64(c.drops))

		l := f.start(t, addr)
		require.Eventually(t, func() bool { return c.bufferedOOM() == 0 }, eventually, tick)
		for i, name := range containers {
			want := 0
			if i >= 2 {
				want = 1
			}
			assert.Equal(t, want, kills(l.memory, f.app, name), name)
		}
	})
}

func TestStreamClientConfigNamesTheBadField(t *testing.T) {
	good := StreamConfig{Addr: "127.0.0.1:1", TLS: &tls.Config{MinVersion: tls.VersionTLS13}, TokenFile: "/token", NodeName: "node-a"}
	tests := []struct {
		name  string
		edit  func(*StreamConfig)
		field string
	}{
		{"NoAddr", func(c *StreamConfig) { c.Addr = "" }, "Addr"},
		{"NoTLS", func(c *StreamConfig) { c.TLS = nil }, "TLS"},
		{"NoToken", func(c *StreamConfig) { c.TokenFile = "" }, "TokenFile"},
		{"NoNode", func(c *StreamConfig) { c.NodeName = "" }, "NodeName"},
		{"BadOOMSource", func(c *StreamConfig) { c.OOMSource = "dmesg" }, "OOMSource"},
		{"BackoffInverted", func(c *StreamConfig) { c.MinBackoff, c.MaxBackoff = time.Second, time.Millisecond }, "MaxBackoff"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := good
			tt.edit(&cfg)
			_, err := NewStreamClient(cfg)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.field)
		})
	}
	c, err := NewStreamClient(good)
	require.NoError(t, err)
	assert.Equal(t, StreamDisconnected, c.State())
}

// forwarder is the leader Service of the cluster, on loopback: it forwards
// each new connection to the ready (leading) replica's stream port, as the
// Service's endpoints follow the replicas' readiness; connections already
// open stay where they are.
type forwarder struct {
	addr   string
	target atomic.Pointer[string]
	mu     sync.Mutex
	conns  []net.Conn
}

// cut closes every forwarded connection.
func (f *forwarder) cut() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range f.conns {
		_ = c.Close()
	}
	f.conns = nil
}

func newForwarder(t *testing.T) *forwarder {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = lis.Close() })
	f := &forwarder{addr: lis.Addr().String()}
	go func() {
		for {
			in, err := lis.Accept()
			if err != nil {
				return
			}
			target := f.target.Load()
			if target == nil {
				_ = in.Close() // no ready endpoint: refused
				continue
			}
			out, err := net.Dial("tcp", *target)
			if err != nil {
				_ = in.Close()
				continue
			}
			f.mu.Lock()
			f.conns = append(f.conns, in, out)
			f.mu.Unlock()
			go func() { _, _ = io.Copy(out, in); _ = out.Close() }()
			go func() { _, _ = io.Copy(in, out); _ = in.Close() }()
		}
	}()
	return f
}

func (f *forwarder) routeTo(addr string) { f.target.Store(&addr) }
func (f *forwarder) noEndpoint()         { f.target.Store(nil) }

// TestStreamFollowsLeaderFailover runs two leader replicas behind a
// Service-like forwarder. The leader is stopped mid-stream (it lost its
// Lease); one OOM kill happens while no replica leads and one just after
// the other takes over: the new leader counts each once, counters go on,
// and a resent event (its ack lost) is acknowledged but not counted again.
func TestStreamFollowsLeaderFailover(t *testing.T) {
	f := newLeaderFixture(t)
	app := string(f.app)
	key := ContainerKey{PodUID: app, Name: "app"}
	var leadingA, leadingB atomic.Bool
	a := f.startReplica(t, "127.0.0.1:0", leadingA.Load)
	b := f.startReplica(t, "127.0.0.1:0", leadingB.Load)
	svc := newForwarder(t)
	leadingA.Store(true)
	svc.routeTo(a.addr)

	c := f.client(t, svc.addr, 0)
	mono := monoNow(t)
	c.Counters([]Sample{{Key: key, At: time.Now(), Periods: 100, Throttled: 10}})
	c.OOM(oom.Kill{Source: "cgroup", KernelNS: mono, CgroupID: 1, Count: 1}, app, "app")
	require.Eventually(t, func() bool { return kills(a.memory, f.app, "app") == 1 && c.bufferedOOM() == 0 }, eventually, tick)

	// A loses its Lease and stops; for a while no replica leads.
	leadingA.Store(false)
	svc.noEndpoint()
	a.grpc.Stop()
	require.Eventually(t, func() bool { return c.State() != StreamConnected }, eventually, tick)
	c.OOM(oom.Kill{Source: "cgroup", KernelNS: monoNow(t), CgroupID: 1, Count: 1}, app, "app")
	c.Counters([]Sample{{Key: key, At: time.Now(), Periods: 200, Throttled: 30}})
	time.Sleep(300 * time.Millisecond) // reconnects are refused meanwhile
	assert.Equal(t, 1, c.bufferedOOM(), "the kill waits for a leader")

	// B takes over; the Service routes to it.
	leadingB.Store(true)
	svc.routeTo(b.addr)
	c.OOM(oom.Kill{Source: "cgroup", KernelNS: monoNow(t), CgroupID: 1, Count: 1}, app, "app")
	require.Eventually(t, func() bool { return c.bufferedOOM() == 0 }, eventually, tick)
	assert.Equal(t, 3, kills(b.memory, f.app, "app"),
		"the new leader counts the kill A acknowledged (replayed to every new stream) and the two after it, once each")
	assert.Equal(t, 1, kills(a.memory, f.app, "app"), "the old leader counted the one before the failover")
	require.Eventually(t, func() bool {
		s, ok := latestSample(b.memory, f.app)
		return ok && s.Periods == 200 && s.Throttled == 30
	}, eventually, tick)

	// The counters go on from where they were: B's window over them is
	// the increase since the snapshot, never negative.
	c.Counters([]Sample{{Key: key, At: time.Now(), Periods: 260, Throttled: 31}})
	require.Eventually(t, func() bool { s, _ := latestSample(b.memory, f.app); return s.Periods == 260 }, eventually, tick)
	now := time.Now()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{UID: f.app}}
	w, err := b.memory.ThrottleWindows([]*corev1.Pod{pod}, []string{"app"}, now.Add(-time.Hour), now.Add(time.Hour))
	require.NoError(t, err)
	assert.Equal(t, healthwatch.ThrottleWindow{Periods: 60, Throttled: 1}, w["app"])

	// An event whose ack was lost is sent again on the next stream: B
	// acknowledges it and does not count it twice.
	c.mu.Lock()
	c.ooms = append(c.ooms, &streamv1.OOMEvent{Seq: c.seq, PodUid: app, Container: "app", KernelNs: monoNow(t), CgroupId: 1, Count: 1})
	c.mu.Unlock()
	svc.cut() // the stream drops; the agent reconnects to B
	require.Eventually(t, func() bool { return c.bufferedOOM() == 0 }, eventually, tick)
	assert.Equal(t, 3, kills(b.memory, f.app, "app"), "neither the replayed events nor the resent one are counted again")
	// The new stream replays the three acknowledged kills first (B counted
	// them: resent); the resent one comes after seq 3 on the same stream.
	assert.Equal(t, 3.0, b.resent(t))
}

// TestAgentRestartKeepsCountsRight restarts the agent (a new StreamClient,
// a new incarnation whose OOM seqs start at 1 again) against one leader:
// its absolute counters continue the container's series (no reset, no
// negative throttling), and its first kill is counted, not taken for the
// old incarnation's seq 1.
func TestAgentRestartKeepsCountsRight(t *testing.T) {
	f := newLeaderFixture(t)
	app := string(f.app)
	key := ContainerKey{PodUID: app, Name: "app"}
	l := f.start(t, "127.0.0.1:0")
	start := time.Now()

	old := f.client(t, l.addr, 0)
	old.Counters([]Sample{{Key: key, At: time.Now(), Periods: 1000, Throttled: 100}})
	old.OOM(oom.Kill{Source: "cgroup", KernelNS: monoNow(t), Count: 1}, app, "app")
	require.Eventually(t, func() bool { return old.bufferedOOM() == 0 && kills(l.memory, f.app, "app") == 1 }, eventually, tick)
	f.stops[0]()

	restarted := f.client(t, l.addr, 0)
	restarted.Counters([]Sample{{Key: key, At: time.Now(), Periods: 1100, Throttled: 104}})
	restarted.OOM(oom.Kill{Source: "cgroup", KernelNS: monoNow(t), Count: 1}, app, "app")
	require.Eventually(t, func() bool { return restarted.bufferedOOM() == 0 }, eventually, tick)
	assert.Equal(t, 2, kills(l.memory, f.app, "app"), "the new incarnation's seq 1 is a new kill")
	assert.Equal(t, 0.0, l.resent(t))
	require.Eventually(t, func() bool { s, _ := latestSample(l.memory, f.app); return s.Periods == 1100 }, eventually, tick)

	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{UID: f.app}}
	w, err := l.memory.ThrottleWindows([]*corev1.Pod{pod}, []string{"app"}, start.Add(-time.Minute), time.Now().Add(time.Minute))
	require.NoError(t, err)
	assert.Equal(t, healthwatch.ThrottleWindow{Periods: 100, Throttled: 4}, w["app"], "the absolute counters continue the series")
}

// oomKilledEvent is what pod discovery reports when the kubelet's Pods API
// shows the app container OOM-killed and restarted for the n-th time.
func oomKilledEvent(app string, n int32, finished time.Time) ContainerEvent {
	return ContainerEvent{Namespace: streamTestNamespace, Pod: "app-a", PodUID: app, Container: "app", RestartCount: n,
		Terminated: &corev1.ContainerStateTerminated{Reason: "OOMKilled", ExitCode: 137, ContainerID: fmt.Sprintf("containerd://run-%d", n),
			StartedAt: metav1.NewTime(finished.Add(-time.Second)), FinishedAt: metav1.NewTime(finished)}}
}

// TestContainerEventsSurviveALeaderOutage records container events while
// no leader answers: they wait in the agent's buffer, reach the next
// leader with their restart counts and terminations, are acknowledged and
// leave the buffer; one resent because its ack was lost changes nothing.
// Past MaxBufferedEvents the oldest are dropped and counted.
func TestContainerEventsSurviveALeaderOutage(t *testing.T) {
	f := newLeaderFixture(t)
	app := string(f.app)

	l := f.start(t, "127.0.0.1:0")
	svc := newForwarder(t)
	svc.routeTo(l.addr)
	c := f.client(t, svc.addr, 0)
	finished := time.Now().Add(-time.Minute).Truncate(time.Second)
	c.ContainerEvent(oomKilledEvent(app, 1, finished))
	require.Eventually(t, func() bool { return c.bufferedEvents() == 0 }, eventually, tick, "the ack empties the buffer")
	got, ok := l.statuses.AgentStatus(f.app, "app")
	require.True(t, ok)
	assert.Equal(t, int32(1), got.RestartCount)
	require.Len(t, got.Terminations, 1)
	assert.Equal(t, healthwatch.Termination{ContainerID: "containerd://run-1", Reason: "OOMKilled", ExitCode: 137,
		StartedAt: finished.Add(-time.Second), FinishedAt: finished}, got.Terminations[0])

	svc.noEndpoint()
	l.grpc.Stop()
	require.Eventually(t, func() bool { return c.State() != StreamConnected }, eventually, tick)
	c.ContainerEvent(oomKilledEvent(app, 2, finished.Add(10*time.Second)))
	c.ContainerEvent(ContainerEvent{PodUID: app, Container: "app", RestartCount: 3})
	time.Sleep(300 * time.Millisecond) // a few failed reconnects
	assert.Equal(t, 2, c.bufferedEvents(), "the events are kept")

	l2 := f.start(t, "127.0.0.1:0")
	svc.routeTo(l2.addr)
	require.Eventually(t, func() bool { return c.bufferedEvents() == 0 }, eventually, tick)
	got, _ = l2.statuses.AgentStatus(f.app, "app")
	assert.Equal(t, int32(3), got.RestartCount)
	require.Len(t, got.Terminations, 1, "the new leader has what it was sent")
	assert.Equal(t, "containerd://run-2", got.Terminations[0].ContainerID)
	assert.Equal(t, 2.0, l2.counter(t, "kerf_stream_container_events_total", "new"))

	// An event whose ack was lost is sent again on the next stream to the
	// same leader: acknowledged, and the leader's view does not change.
	c.mu.Lock()
	c.events = append(c.events, &streamv1.ContainerEvent{Seq: c.evSeq, PodUid: app, Container: "app", RestartCount: 3,
		Terminated: &streamv1.Termination{Reason: "OOMKilled", ContainerId: "containerd://run-2", FinishedAtUnixNs: finished.Add(10 * time.Second).UnixNano()}})
	c.mu.Unlock()
	svc.cut()
	require.Eventually(t, func() bool { return c.bufferedEvents() == 0 }, eventually, tick)
	assert.Equal(t, 1.0, l2.counter(t, "kerf_stream_container_events_total", "known"), "the resent event")
	assert.Equal(t, 2.0, l2.counter(t, "kerf_stream_container_events_total", "new"))
	got, _ = l2.statuses.AgentStatus(f.app, "app")
	assert.Equal(t, int32(3), got.RestartCount)
	assert.Len(t, got.Terminations, 1, "the run is held once")

	t.Run("TheBufferIsBounded", func(t *testing.T) {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		addr := lis.Addr().String()
		require.NoError(t, lis.Close())
		c, err := NewStreamClient(StreamConfig{Addr: addr, TLS: f.clientTLS, TokenFile: f.tokenFile, NodeName: "node-a",
			MaxBufferedEvents: 2, Registerer: prometheus.NewRegistry()})
		require.NoError(t, err)
		for n := range int32(5) {
			c.ContainerEvent(ContainerEvent{PodUID: app, Container: "app", RestartCount: n + 1})
		}
		assert.Equal(t, 2, c.bufferedEvents())
		assert.Equal(t, 3.0, testutil.ToFloat64(c.eventDrops))
		assert.Equal(t, []int32{4, 5}, []int32{c.events[0].GetRestartCount(), c.events[1].GetRestartCount()}, "the newest are kept")
	})
}
