package stream

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"

	streamv1 "github.com/kerf-dev/kerf/api/stream/v1"
	"github.com/kerf-dev/kerf/cluster/healthwatch"
)

// TestAbsoluteOOMKillCountsAreSummedPerInstance: the leader sums an
// index's oom_kills into the instance's absolute count, knows none before
// oom_kills_read, and takes a restarted agent's new stream's absolute
// count (kills made while it was down included) as the same instance's;
// a count that overflows closes the stream.
func TestAbsoluteOOMKillCountsAreSummedPerInstance(t *testing.T) {
	f := newFixture(t)
	started := time.Unix(1_700_000_000, 0)
	counts := func() []healthwatch.InstanceOOMKills { return f.memory.OOMKillCounts(f.podA, "app") }
	wait := func(want uint64) {
		t.Helper()
		require.Eventually(t, func() bool {
			c := counts()
			return len(c) == 1 && c[0].Kills == want
		}, 10*time.Second, 10*time.Millisecond, "the instance's count never reached %d: %v", want, counts())
	}

	st := f.connect(t, f.agentToken)
	send(st, hello("node-a"),
		counters(1e9, &streamv1.ContainerCounters{Index: 1, PodUid: string(f.podA), Container: "app", StartedAtUnixNs: started.UnixNano(), Periods: 10}))
	// A barrier: the container event is acknowledged once the pass before
	// it was ingested.
	send(st, containerEvent(1, f.podA, "app", 0, ""))
	recvAck(t, st)
	assert.Empty(t, counts(), "no count read yet: unknown, not zero")

	send(st,
		counters(2e9, &streamv1.ContainerCounters{Index: 1, Periods: 10, OomKillsRead: true}),
		counters(3e9, &streamv1.ContainerCounters{Index: 1, Periods: 10, OomKills: 1}),
		counters(4e9, &streamv1.ContainerCounters{Index: 1, Periods: 10}),
	)
	wait(1)
	require.NoError(t, st.CloseSend())
	assert.Equal(t, codes.OK, closedWith(t, st))

	// The agent restarted: a new stream, a new index, the absolute count.
	st = f.connect(t, f.agentToken)
	h := hello("node-a")
	h.GetHello().StartedAtUnixNs = time.Now().UnixNano()
	send(st, h,
		counters(9e9, &streamv1.ContainerCounters{Index: 1, PodUid: string(f.podA), Container: "app", StartedAtUnixNs: started.UnixNano(),
			Periods: 40, OomKills: 3, OomKillsRead: true}))
	wait(3)
	c := counts()
	assert.True(t, c[0].Started.Equal(started), "one instance: the same container run")

	send(st, counters(10e9, &streamv1.ContainerCounters{Index: 1, Periods: 1, OomKills: ^uint64(0)}))
	assert.Equal(t, codes.InvalidArgument, closedWith(t, st), "an overflowing count is a broken message")
	assert.Equal(t, uint64(3), counts()[0].Kills)
}
