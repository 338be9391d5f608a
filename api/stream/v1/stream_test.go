package streamv1_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/proto"

	streamv1 "github.com/kerf-dev/kerf/api/stream/v1"
)

// maxUnchangedSampleBytes is the wire budget of docs/design.md section 10.
const maxUnchangedSampleBytes = 32

// node330 is the design's reference node: 110 pods with 3 containers each.
const node330 = 330

// firstPass is the first Counters of a stream: every container carries its
// identity and absolute counters.
func firstPass(n int) *streamv1.AgentMessage {
	c := &streamv1.Counters{KernelNs: 1_234_567_890_123_456, Snapshot: true}
	for i := range n {
		c.Containers = append(c.Containers, &streamv1.ContainerCounters{
			Index:           uint32(i + 1),
			PodUid:          fmt.Sprintf("6f1c2b3a-9d4e-4f5a-8b7c-%012x", i/3),
			Container:       fmt.Sprintf("app-%d", i%3),
			StartedAtUnixNs: 1_790_000_000_000_000_000 + int64(i)*1_000_000_007,
			KernelNsDelta:   uint64(i) * 2_900,
			Periods:         864_000 + uint64(i)*17,
			Throttled:       12_000 + uint64(i),
			ThrottledNs:     93_000_000_000 + uint64(i)*1_000_003,
		})
	}
	return &streamv1.AgentMessage{Body: &streamv1.AgentMessage_Counters{Counters: c}}
}

// steadyPass is a later Counters one second on: every container only shows
// its timestamp offset in the pass and the periods of a 100 ms CFS period,
// and every throttled-th container was throttled a little (0 for none).
func steadyPass(n, throttled int) *streamv1.AgentMessage {
	c := &streamv1.Counters{KernelNs: 1_234_568_890_123_456}
	for i := range n {
		s := &streamv1.ContainerCounters{
			Index:         uint32(i + 1),
			KernelNsDelta: uint64(i) * 2_900, // about 1 ms for the whole pass
			Periods:       10,
		}
		if throttled > 0 && i%throttled == 0 {
			s.Throttled = 2
			s.ThrottledNs = 7_500_000
		}
		c.Containers = append(c.Containers, s)
	}
	return &streamv1.AgentMessage{Body: &streamv1.AgentMessage_Counters{Counters: c}}
}

// usagePass is steadyPass on a pass that read usage (every usage interval,
// 10 s): every container's CPU increment (0.1 to 10 s of CPU in 10 s), its
// memory held still.
func usagePass(n int) *streamv1.AgentMessage {
	msg := steadyPass(n, 10)
	for i, c := range msg.GetCounters().GetContainers() {
		c.Usage = &streamv1.ContainerUsage{CpuNs: 100_000_000 + uint64(i)*30_000_000}
	}
	return msg
}

func TestUnchangedContainerSampleFitsWireBudget(t *testing.T) {
	tests := []struct {
		name string
		msg  *streamv1.AgentMessage
	}{
		{name: "330 unchanged", msg: steadyPass(node330, 0)},
		{name: "330 with every tenth throttled", msg: steadyPass(node330, 10)},
		{name: "330 with usage, memory still", msg: usagePass(node330)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := proto.Marshal(tt.msg)
			require.NoError(t, err)
			n := len(tt.msg.GetCounters().GetContainers())
			perSample := float64(len(b)) / float64(n)
			t.Logf("%d containers: %d bytes, %.2f bytes/sample", n, len(b), perSample)
			assert.LessOrEqual(t, perSample, float64(maxUnchangedSampleBytes))
		})
	}
}

func TestFirstPassCarriesIdentityAndRoundTrips(t *testing.T) {
	msg := firstPass(node330)
	b, err := proto.Marshal(msg)
	require.NoError(t, err)
	t.Logf("first pass, %d containers: %d bytes, %.2f bytes/sample",
		node330, len(b), float64(len(b))/node330)

	var got streamv1.AgentMessage
	require.NoError(t, proto.Unmarshal(b, &got))
	assert.True(t, proto.Equal(msg, &got))
	first := got.GetCounters().GetContainers()[0]
	assert.Equal(t, "6f1c2b3a-9d4e-4f5a-8b7c-000000000000", first.GetPodUid())
	assert.Equal(t, "app-0", first.GetContainer())
}

func TestLeaderMessagesRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		msg  *streamv1.LeaderMessage
	}{
		{name: "ack", msg: &streamv1.LeaderMessage{Body: &streamv1.LeaderMessage_Ack{Ack: &streamv1.Ack{OomSeq: 42}}}},
		{name: "resync", msg: &streamv1.LeaderMessage{Body: &streamv1.LeaderMessage_Resync{Resync: &streamv1.Resync{Reason: "unknown index 7"}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := proto.Marshal(tt.msg)
			require.NoError(t, err)
			var got streamv1.LeaderMessage
			require.NoError(t, proto.Unmarshal(b, &got))
			assert.True(t, proto.Equal(tt.msg, &got))
		})
	}
}

func BenchmarkMarshalCounters330Unchanged(b *testing.B) {
	for _, c := range []struct {
		name string
		msg  *streamv1.AgentMessage
	}{{"counters", steadyPass(node330, 0)}, {"usage", usagePass(node330)}} {
		b.Run(c.name, func(b *testing.B) {
			var size int
			b.ReportAllocs()
			for b.Loop() {
				out, err := proto.Marshal(c.msg)
				if err != nil {
					b.Fatal(err)
				}
				size = len(out)
			}
			b.ReportMetric(float64(size)/node330, "bytes/sample")
		})
	}
}

// ackServer acknowledges every OOM event it receives, after a Hello.
type ackServer struct {
	streamv1.UnimplementedStreamServer
}

func (ackServer) Connect(s grpc.BidiStreamingServer[streamv1.AgentMessage, streamv1.LeaderMessage]) error {
	first, err := s.Recv()
	if err != nil {
		return err
	}
	if first.GetHello() == nil {
		return status.Error(codes.InvalidArgument, "first message: want hello")
	}
	for {
		m, err := s.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if ev := m.GetOomEvent(); ev != nil {
			ack := &streamv1.Ack{OomSeq: ev.GetSeq()}
			if err := s.Send(&streamv1.LeaderMessage{Body: &streamv1.LeaderMessage_Ack{Ack: ack}}); err != nil {
				return err
			}
		}
	}
}

func TestConnectAcksOOMEventOverGRPC(t *testing.T) {
	lis := bufconn.Listen(1 << 20)
	srv := grpc.NewServer()
	streamv1.RegisterStreamServer(srv, ackServer{})
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)

	conn, err := grpc.NewClient("passthrough:///bufconn",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })

	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	s, err := streamv1.NewStreamClient(conn).Connect(ctx)
	require.NoError(t, err)
	hello := &streamv1.Hello{NodeName: "node-a", BootId: "b00t", OomSource: streamv1.OOMSource_OOM_SOURCE_BPF, FullSnapshot: true}
	require.NoError(t, s.Send(&streamv1.AgentMessage{Body: &streamv1.AgentMessage_Hello{Hello: hello}}))
	ev := &streamv1.OOMEvent{Seq: 7, PodUid: "6f1c2b3a-9d4e-4f5a-8b7c-000000000001", Container: "app", Pid: 4242, Comm: "java", Count: 1}
	require.NoError(t, s.Send(&streamv1.AgentMessage{Body: &streamv1.AgentMessage_OomEvent{OomEvent: ev}}))

	got, err := s.Recv()
	require.NoError(t, err)
	assert.Equal(t, uint64(7), got.GetAck().GetOomSeq())
	require.NoError(t, s.CloseSend())
}
