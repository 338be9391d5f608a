package stream

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"sigs.k8s.io/controller-runtime/pkg/cache"

	streamv1 "github.com/kerf-dev/kerf/api/stream/v1"
)

// attempt opens a stream with token, sends msg and returns how the
// stream ended.
func (f *fixture) attempt(t *testing.T, token string, msg *streamv1.AgentMessage) error {
	t.Helper()
	conn, err := grpc.NewClient(f.addr, grpc.WithTransportCredentials(f.creds))
	require.NoError(t, err)
	defer func() { _ = conn.Close() }()
	ctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(t.Context(), "authorization", "Bearer "+token), 30*time.Second)
	defer cancel()
	st, err := streamv1.NewStreamClient(conn).Connect(ctx)
	if err != nil {
		return err
	}
	_ = st.Send(msg) // blocks on flow control until the server ends the stream
	_, err = st.Recv()
	return err
}

// TestNothingIsDecodedBeforeAuthentication is the attack of issue 30,
// item 2: streams with bad tokens each send one message of the largest
// size, made of empty counter entries (2 bytes each on the wire, a struct
// each decoded: some 300 MiB for 4 MiB), while their authentication
// waits (here for the one handshake slot, which an agent that sends no
// Hello holds; in a cluster, behind a burst of reviews). Before, Connect
// received (and decoded) the first message while the token was not
// checked yet. Now nothing is read until the token authenticated: what
// the whole attack allocates, the test's own client included, stays
// under 64 MiB, and every stream is refused.
func TestNothingIsDecodedBeforeAuthentication(t *testing.T) {
	f := newFixture(t, func(c *Config, _ *cache.Options) { c.MaxHandshakes, c.HandshakeTimeout = 1, 3*time.Second })
	holder := f.connect(t, f.agentToken) // authenticates, then holds the slot waiting for its Hello
	defer func() { _ = holder.CloseSend() }()
	require.Eventually(t, func() bool { return len(f.srv.handshakes) == 1 }, 10*time.Second, 10*time.Millisecond, "the slot is never taken")
	entries := make([]*streamv1.ContainerCounters, (streamv1.MaxMessageBytes-64)/2)
	for i := range entries {
		entries[i] = &streamv1.ContainerCounters{}
	}
	big := counters(1, entries...)
	require.LessOrEqual(t, proto.Size(big), streamv1.MaxMessageBytes, "the largest message the server accepts")
	require.Greater(t, proto.Size(big), streamv1.MaxMessageBytes-100)

	const streams = 4
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	codesSeen := make([]codes.Code, streams)
	var wg sync.WaitGroup
	for i := range streams {
		wg.Go(func() { codesSeen[i] = status.Code(f.attempt(t, fmt.Sprintf("bad-token-%d", i), big)) })
	}
	wg.Wait()
	runtime.ReadMemStats(&after)
	allocated := after.TotalAlloc - before.TotalAlloc
	t.Logf("%d unauthenticated streams of one %d-byte message each: %d MiB allocated in the process (client included)",
		streams, proto.Size(big), allocated>>20)
	for i, c := range codesSeen {
		assert.Contains(t, []codes.Code{codes.Unauthenticated, codes.ResourceExhausted}, c, "stream %d", i)
	}
	assert.Less(t, allocated, uint64(64<<20), "the messages were decoded before the tokens were checked")
}

// TestAnOversizedTokenIsAFailureNotAReview: a token past MaxTokenBytes is
// refused without a TokenReview (the apiserver would answer 413, which
// read as "the apiserver failed" and spent no failure budget), and each
// one is charged to its source: past the burst, the source is refused as
// exhausted. Headers past maxHeaderListBytes are refused by the
// transport before Connect runs.
func TestAnOversizedTokenIsAFailureNotAReview(t *testing.T) {
	f := newFixture(t, func(c *Config, _ *cache.Options) { c.ReviewsPerSecond, c.ReviewBurst = 0.01, 2 })
	errs := func(reason string) float64 { return testutil.ToFloat64(f.srv.metrics.errors.WithLabelValues(reason)) }
	reviews := tokenReviews(t, f.cs)
	huge := strings.Repeat("x", MaxTokenBytes+1)
	for range 2 {
		err := f.attempt(t, huge, hello("node-a"))
		assert.Equal(t, codes.Unauthenticated, status.Code(err), "%v", err)
		assert.Contains(t, status.Convert(err).Message(), fmt.Sprintf("more than %d", MaxTokenBytes))
	}
	assert.Equal(t, 2.0, errs("token_too_long"))
	err := f.attempt(t, huge, hello("node-a"))
	assert.Equal(t, codes.ResourceExhausted, status.Code(err), "the source's budget is spent: %v", err)
	assert.Equal(t, reviews, tokenReviews(t, f.cs), "no TokenReview for an oversized token")

	err = f.attempt(t, strings.Repeat("x", 2*maxHeaderListBytes), hello("node-a"))
	assert.NotEqual(t, codes.OK, status.Code(err), "headers past the bound are refused")
	assert.Equal(t, 2.0, errs("token_too_long"), "refused by the transport, before Connect")

	// An agent still gets in: its budget is its pod's, not the address's.
	assert.Equal(t, codes.OK, f.connectOnce(t.Context(), honestAgent{node: "node-a", token: f.agentToken}))
}

// TestTheStateOfANodeGoneIsDropped: the leader kept each node's agent
// state forever, so it grew with node churn (issue 30, item 14). A node
// whose stream ended keeps its state for releasedNodeTTL (an agent that
// reconnects keeps its incarnation); after it, the next stream's end
// drops it.
func TestTheStateOfANodeGoneIsDropped(t *testing.T) {
	var offset atomic.Int64
	f := newFixture(t, func(c *Config, _ *cache.Options) {
		c.Now = func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
	})
	states := func() float64 { return testutil.ToFloat64(f.srv.metrics.nodeStates) }
	// once connects the agent, then ends its stream and waits until the
	// leader let it go.
	once := func(a honestAgent) {
		t.Helper()
		ctx, cancel := context.WithCancel(t.Context())
		require.Equal(t, codes.OK, f.connectOnce(ctx, a))
		cancel()
		require.Eventually(t, func() bool { return testutil.ToFloat64(f.srv.metrics.streams) == 0 }, 10*time.Second, 10*time.Millisecond,
			"the stream of %s never ended", a.node)
	}
	agents := f.honestAgents(t, 2)
	once(agents[0])
	assert.Equal(t, 1.0, states())

	// Within the TTL another node's stream ending drops nothing.
	offset.Store(int64(releasedNodeTTL / 2))
	once(agents[1])
	assert.Equal(t, 2.0, states(), "both nodes' states are kept within the TTL")

	// Past it, the first node's state goes at the next stream's end.
	offset.Store(int64(releasedNodeTTL + 2*sweepEvery))
	once(agents[1])
	assert.Equal(t, 1.0, states(), "the state of the node gone is dropped")
	f.srv.nodesMu.Lock()
	_, kept := f.srv.nodes[agents[0].node]
	f.srv.nodesMu.Unlock()
	assert.False(t, kept, "node %s, gone for over an hour", agents[0].node)
}
