package stream

import (
	"context"
	"net"
	goruntime "runtime"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/protobuf/proto"

	streamv1 "github.com/kerf-dev/kerf/api/stream/v1"
)

// TestLargeMessagesPassTheSmallBuffers: with the connections' small read
// and write buffers, a full snapshot of MaxContainers containers (about
// 110 KiB, past the read buffer, the HTTP/2 frame and the initial
// flow-control window) and a message just under MaxMessageBytes are
// received whole and ingested, and the leader answers after them.
func TestLargeMessagesPassTheSmallBuffers(t *testing.T) {
	f := newFixture(t)
	st := f.connect(t, f.agentToken)
	before := testutil.ToFloat64(f.srv.metrics.samples)
	var cs []*streamv1.ContainerCounters
	for i := range DefaultMaxContainers {
		cs = append(cs, &streamv1.ContainerCounters{Index: uint32(i + 1), PodUid: string(f.podA), Container: "app",
			StartedAtUnixNs: int64(i + 1), Periods: 100, Throttled: 10})
	}
	snapshot := counters(1e9, cs...)
	snapshot.GetCounters().Snapshot = true
	size := len(mustMarshal(t, snapshot))
	require.Greater(t, size, 64<<10, "the snapshot is far larger than the buffers (else this checks nothing)")
	near := oom(1, f.podA, "app")
	near.GetOomEvent().Comm = string(make([]byte, streamv1.MaxMessageBytes-1024))
	require.Less(t, len(mustMarshal(t, near)), streamv1.MaxMessageBytes)
	send(st, hello("node-a"), snapshot, near)
	assert.Equal(t, uint64(1), recvAck(t, st).GetOomSeq(), "the OOM event behind the snapshot, itself near the size limit, is acknowledged")
	assert.Equal(t, before+DefaultMaxContainers, testutil.ToFloat64(f.srv.metrics.samples), "every container of the snapshot was ingested")
}

// TestConnectionsHoldSmallBuffers: an idle agent connection costs the
// leader far less heap with the stream server's buffers than with gRPC's
// defaults (a 32 KiB read buffer each, and 32 KiB write buffers borrowed
// while writing). Both ends are
// in this process and the client's are gRPC's defaults in both runs, so
// the difference is the server's; the figures are logged
// (docs/performance.md).
func TestConnectionsHoldSmallBuffers(t *testing.T) {
	f := newFixture(t)
	const n = 100
	held := func(g *grpc.Server) uint64 {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		go func() { _ = g.Serve(lis) }()
		defer g.Stop()
		var before, after goruntime.MemStats
		goruntime.GC()
		goruntime.GC()
		goruntime.ReadMemStats(&before)
		conns := make([]*grpc.ClientConn, n)
		for i := range conns {
			conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(f.creds))
			require.NoError(t, err)
			conn.Connect()
			conns[i] = conn
		}
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		for _, conn := range conns {
			for s := conn.GetState(); s != connectivity.Ready; s = conn.GetState() {
				require.True(t, conn.WaitForStateChange(ctx, s), "connection never ready")
			}
		}
		time.Sleep(200 * time.Millisecond) // the server's side settles
		goruntime.GC()
		goruntime.GC() // and a second time: pooled buffers go on the second
		goruntime.ReadMemStats(&after)
		for _, conn := range conns {
			_ = conn.Close()
		}
		return after.HeapAlloc - before.HeapAlloc
	}
	tlsConfig := f.serverTLS
	defaults := held(newGRPCServer(f.srv, tlsConfig))
	small := held(NewGRPCServer(f.srv, tlsConfig))
	t.Logf("%d idle connections, live heap of both ends: %.0f bytes a connection with gRPC's buffers, %.0f with the stream server's (%.0f fewer)",
		n, float64(defaults)/n, float64(small)/n, float64(defaults-small)/n)
	assert.Less(t, float64(small), float64(defaults)-n*20<<10, "the stream server's buffers save at least 20 KiB a connection")
}

func mustMarshal(t *testing.T, m *streamv1.AgentMessage) []byte {
	t.Helper()
	b, err := proto.Marshal(m)
	require.NoError(t, err)
	return b
}
