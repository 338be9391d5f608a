package stream

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	streamv1 "github.com/kerf-dev/kerf/api/stream/v1"
	"github.com/kerf-dev/kerf/cluster/healthwatch"
	"github.com/kerf-dev/kerf/node/oom"
	"github.com/kerf-dev/kerf/node/report"
)

// TestStreamFollowsLeaderFailover runs two leader replicas behind a
// Service-like forwarder. The leader is stopped mid-stream (it lost its
// Lease); one OOM kill happens while no replica leads and one just after
// the other takes over: the new leader counts each once, counters go on,
// and a resent event (its ack lost) is acknowledged but not counted again.
func TestStreamFollowsLeaderFailover(t *testing.T) {
	f := newLeaderFixture(t)
	app := string(f.app)
	key := report.ContainerKey{PodUID: app, Name: "app"}
	var leadingA, leadingB atomic.Bool
	a := f.startReplica(t, "127.0.0.1:0", leadingA.Load)
	b := f.startReplica(t, "127.0.0.1:0", leadingB.Load)
	svc := newForwarder(t)
	leadingA.Store(true)
	svc.routeTo(a.addr)

	c := f.client(t, svc.addr, 0)
	mono := monoNow(t)
	c.Counters([]report.Sample{{Key: key, At: time.Now(), Periods: 100, Throttled: 10}})
	c.OOM(oom.Kill{Source: "cgroup", KernelNS: mono, CgroupID: 1, Count: 1}, app, "app")
	require.Eventually(t, func() bool { return kills(a.memory, f.app, "app") == 1 && c.bufferedOOM() == 0 }, eventually, tick)

	// A loses its Lease and stops; for a while no replica leads.
	leadingA.Store(false)
	svc.noEndpoint()
	a.grpc.Stop()
	require.Eventually(t, func() bool { return c.State() != Connected }, eventually, tick)
	c.OOM(oom.Kill{Source: "cgroup", KernelNS: monoNow(t), CgroupID: 1, Count: 1}, app, "app")
	c.Counters([]report.Sample{{Key: key, At: time.Now(), Periods: 200, Throttled: 30}})
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
	c.Counters([]report.Sample{{Key: key, At: time.Now(), Periods: 260, Throttled: 31}})
	require.Eventually(t, func() bool { s, _ := latestSample(b.memory, f.app); return s.Periods == 260 }, eventually, tick)
	now := time.Now()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{UID: f.app}}
	w, err := b.memory.ThrottleWindows([]*corev1.Pod{pod}, []string{"app"}, now.Add(-time.Hour), now.Add(time.Hour))
	require.NoError(t, err)
	assert.Equal(t, healthwatch.ThrottleWindow{Periods: 60, Throttled: 1}, w["app"])

	// An event whose ack was lost is sent again on the next stream: B
	// acknowledges it and does not count it twice.
	c.mu.Lock()
	c.ooms.items = append(c.ooms.items, &streamv1.OOMEvent{Seq: c.ooms.seq, PodUid: app, Container: "app", KernelNs: monoNow(t), CgroupId: 1, Count: 1})
	c.mu.Unlock()
	svc.cut() // the stream drops; the agent reconnects to B
	require.Eventually(t, func() bool { return c.bufferedOOM() == 0 }, eventually, tick)
	assert.Equal(t, 3, kills(b.memory, f.app, "app"), "neither the replayed events nor the resent one are counted again")
	// The new stream replays the three acknowledged kills first (B counted
	// them: resent); the resent one comes after seq 3 on the same stream.
	assert.Equal(t, 3.0, b.resent(t))
}

// TestAgentRestartKeepsCountsRight restarts the agent (a new Client,
// a new incarnation whose OOM seqs start at 1 again) against one leader:
// its absolute counters continue the container's series (no reset, no
// negative throttling), and its first kill is counted, not taken for the
// old incarnation's seq 1.
func TestAgentRestartKeepsCountsRight(t *testing.T) {
	f := newLeaderFixture(t)
	app := string(f.app)
	key := report.ContainerKey{PodUID: app, Name: "app"}
	l := f.start(t, "127.0.0.1:0")
	start := time.Now()

	old := f.client(t, l.addr, 0)
	old.Counters([]report.Sample{{Key: key, At: time.Now(), Periods: 1000, Throttled: 100}})
	old.OOM(oom.Kill{Source: "cgroup", KernelNS: monoNow(t), Count: 1}, app, "app")
	require.Eventually(t, func() bool { return old.bufferedOOM() == 0 && kills(l.memory, f.app, "app") == 1 }, eventually, tick)
	f.stops[0]()

	restarted := f.client(t, l.addr, 0)
	restarted.Counters([]report.Sample{{Key: key, At: time.Now(), Periods: 1100, Throttled: 104}})
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
