package stream

import (
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	streamv1 "github.com/kerf-dev/kerf/api/stream/v1"
	"github.com/kerf-dev/kerf/cluster/healthwatch"
	"github.com/kerf-dev/kerf/node/report"
)

// oomKilledEvent is what pod discovery reports when the kubelet's Pods API
// shows the app container OOM-killed and restarted for the n-th time.
func oomKilledEvent(app string, n int32, finished time.Time) report.ContainerEvent {
	return report.ContainerEvent{Namespace: streamTestNamespace, Pod: "app-a", PodUID: app, Container: "app", RestartCount: n,
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
	require.Eventually(t, func() bool { return c.State() != Connected }, eventually, tick)
	c.ContainerEvent(oomKilledEvent(app, 2, finished.Add(10*time.Second)))
	c.ContainerEvent(report.ContainerEvent{PodUID: app, Container: "app", RestartCount: 3})
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
	c.events.items = append(c.events.items, &streamv1.ContainerEvent{Seq: c.events.seq, PodUid: app, Container: "app", RestartCount: 3,
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
		c, err := NewClient(Config{Addr: addr, TLS: f.clientTLS, TokenFile: f.tokenFile, NodeName: "node-a",
			MaxBufferedEvents: 2, Registerer: prometheus.NewRegistry()})
		require.NoError(t, err)
		for n := range int32(5) {
			c.ContainerEvent(report.ContainerEvent{PodUID: app, Container: "app", RestartCount: n + 1})
		}
		assert.Equal(t, 2, c.bufferedEvents())
		assert.Equal(t, 3.0, testutil.ToFloat64(c.events.drops))
		assert.Equal(t, []int32{4, 5}, []int32{c.events.items[0].GetRestartCount(), c.events.items[1].GetRestartCount()}, "the newest are kept")
	})
}
