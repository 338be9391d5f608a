package stream

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"regexp"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	streamv1 "github.com/kerf-dev/kerf/api/stream/v1"
	"github.com/kerf-dev/kerf/cluster/signals"
)

// The fuzzed leader's pods: fuzzPodA on the stream's node with every kind
// of container, fuzzPodB on another node.
const (
	fuzzNode = "node-a"
	fuzzPodA = types.UID("6f1c2b3a-9d4e-4f5a-8b6c-000000000001")
	fuzzPodB = types.UID("6f1c2b3a-9d4e-4f5a-8b6c-000000000002")
	// fuzzMaxContainers is small so that the fuzzer reaches the bounds.
	fuzzMaxContainers = 4
	fuzzMaxPendingOOM = 3
)

// reasonPattern is what a malformedError's reason looks like: the
// snake_case name of what was wrong, in the stream's close status.
var reasonPattern = regexp.MustCompile(`^[a-z]+(_[a-z]+)*$`)

// fuzzMessages is how many messages one input holds.
const fuzzMessages = 6

// encodeAll encodes up to fuzzMessages messages as the fuzzer's input, one
// []byte each; missing ones are empty (skipped).
func encodeAll(msgs ...*streamv1.AgentMessage) [fuzzMessages][]byte {
	var out [fuzzMessages][]byte
	for i, m := range msgs[:min(len(msgs), fuzzMessages)] {
		b, err := proto.Marshal(m)
		if err != nil {
			panic(err)
		}
		out[i] = b
	}
	return out
}

// newFuzzServer is a stream Server whose Pods is a map: what the leader's
// pod cache answers, without an apiserver for each of the fuzzer's
// millions of inputs (the ingest never calls the apiserver; TokenReviews
// ran when the stream opened).
func newFuzzServer(t *testing.T, now *time.Time) *Server {
	cs, err := kubernetes.NewForConfig(&rest.Config{Host: "https://127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	pods := benchPods{
		fuzzPodA: {ObjectMeta: metav1.ObjectMeta{UID: fuzzPodA, Namespace: "app", Name: "web-1"}, Spec: corev1.PodSpec{NodeName: fuzzNode,
			InitContainers:      []corev1.Container{{Name: "init"}},
			Containers:          []corev1.Container{{Name: "app"}, {Name: "sidecar"}},
			EphemeralContainers: []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "debug"}}}}},
		fuzzPodB: {ObjectMeta: metav1.ObjectMeta{UID: fuzzPodB, Namespace: "app", Name: "web-2"}, Spec: corev1.PodSpec{NodeName: "node-b",
			Containers: []corev1.Container{{Name: "app"}}}},
	}
	srv, err := New(Config{Audience: "kerf-leader", ServiceAccountNamespace: "kerf-system", ServiceAccountName: "kerf-agent",
		Clientset: cs, Pods: pods, Kernel: signals.NewKernel(), Usage: signals.NewUsage(0), Statuses: signals.NewAgentStatuses(0),
		Leading: func() bool { return true }, Now: func() time.Time { return *now },
		Log:    slog.New(slog.NewTextHandler(io.Discard, nil)),
		Limits: Limits{MaxContainers: fuzzMaxContainers, MaxPendingOOM: fuzzMaxPendingOOM, PendingOOMTTL: time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	return srv
}

// fuzzStream is one stream of the fuzzed agent, after its handshake.
type fuzzStream struct {
	in *ingest
	id uint64
}

// dispatch ingests one message of an open stream as Connect does.
func dispatch(in *ingest, msg *streamv1.AgentMessage) error {
	switch b := msg.GetBody().(type) {
	case *streamv1.AgentMessage_Hello:
		return malformed("hello_repeated", "hello was already sent")
	case *streamv1.AgentMessage_Counters:
		_, err := in.counters(b.Counters)
		return err
	case *streamv1.AgentMessage_OomEvent:
		_, err := in.oom(b.OomEvent)
		return err
	case *streamv1.AgentMessage_ContainerEvent:
		_, err := in.containerEvent(b.ContainerEvent)
		return err
	default:
		return malformed("empty_message", "message has no body")
	}
}

// checkBounds holds the stream's bounds: every map an agent fills stays
// within its limit.
func checkBounds(t *testing.T, srv *Server, in *ingest, streamOpen bool) {
	t.Helper()
	max := srv.cfg.MaxContainers
	if len(in.table) > max {
		t.Fatalf("index table holds %d containers, limit %d", len(in.table), max)
	}
	if len(in.used) > 2*in.maxIndexes() {
		t.Fatalf("%d indexes used since the last snapshot, limit %d", len(in.used), 2*in.maxIndexes())
	}
	if len(in.onNode) > max {
		t.Fatalf("node pod cache holds %d pods, limit %d", len(in.onNode), max)
	}
	srv.nodesMu.Lock()
	n := srv.nodes[fuzzNode]
	var listed int
	if n != nil {
		listed = len(n.containers)
	}
	srv.nodesMu.Unlock()
	// A message may list up to the table's size before the node's count is
	// checked; the stream is then closed and its release clears the set.
	if listed > 2*max || (!streamOpen && listed != 0) {
		t.Fatalf("node lists %d container instances (limit %d, stream open %v)", listed, max, streamOpen)
	}
	a := in.agent
	a.mu.Lock()
	pending := len(a.pending)
	a.mu.Unlock()
	if pending > srv.cfg.MaxPendingOOM {
		t.Fatalf("%d pending OOM events, limit %d", pending, srv.cfg.MaxPendingOOM)
	}
}

// FuzzIngest feeds the leader's stream ingest raw bytes, read as a series
// of up to fuzzMessages AgentMessages (one []byte each: the fuzzer mutates
// each message alone) of one agent on node-a.
// A Hello opens a stream (closing the one before, as a reconnect does);
// messages before the first Hello go to a stream opened with a default
// one. The ingest never panics, keeps every bound, and refuses a message
// only with a malformedError that names what was wrong; the stream ends
// there, as Connect ends it.
func FuzzIngest(f *testing.F) {
	started := int64(1_790_000_000_000_000_000)
	seeds := [][]*streamv1.AgentMessage{
		{hello(fuzzNode),
			counters(1e9, &streamv1.ContainerCounters{Index: 1, PodUid: string(fuzzPodA), Container: "app", StartedAtUnixNs: started, Periods: 10}),
			containerEvent(1, fuzzPodA, "app", 0, ""),
			counters(2e9, &streamv1.ContainerCounters{Index: 1, Periods: 10, OomKillsRead: true}),
			counters(3e9, &streamv1.ContainerCounters{Index: 1, Periods: 10, OomKills: 1, Usage: &streamv1.ContainerUsage{CpuNs: 1e9, WorkingSetDelta: 64 << 20, PeakDelta: 80 << 20}}),
			oom(1, fuzzPodA, "app")},
		{hello(fuzzNode),
			counters(1e9, &streamv1.ContainerCounters{Index: 1, PodUid: string(fuzzPodA), Container: "debug", StartedAtUnixNs: started, Periods: 10}),
			oom(1, fuzzPodA, "app"), oom(1, fuzzPodA, "app"), oom(2, fuzzPodA, "sidecar"),
			containerEvent(2, fuzzPodA, "app", 1, "OOMKilled")},
		// A snapshot of every container, a pass, a gone container.
		{{Body: &streamv1.AgentMessage_Hello{Hello: &streamv1.Hello{NodeName: fuzzNode, KernelNs: 5e9, StartedAtUnixNs: 7}}},
			{Body: &streamv1.AgentMessage_Counters{Counters: &streamv1.Counters{KernelNs: 6e9, Snapshot: true, Containers: []*streamv1.ContainerCounters{
				{Index: 0, PodUid: string(fuzzPodA), Container: "app", StartedAtUnixNs: started, Periods: 864_000, Throttled: 12_000, ThrottledNs: 93e9},
				{Index: 1, PodUid: string(fuzzPodA), Container: "sidecar", KernelNsDelta: 2900, Periods: 1},
				{Index: 2, PodUid: string(fuzzPodA), Container: "init"},
				{Index: 3, PodUid: string(fuzzPodB), Container: "app"}}}}},
			{Body: &streamv1.AgentMessage_Counters{Counters: &streamv1.Counters{KernelNs: 7e9, Gone: []uint32{2, 3}, Containers: []*streamv1.ContainerCounters{
				{Index: 0, Periods: 10, Throttled: 2, ThrottledNs: 7_500_000}, {Index: 1, KernelNsDelta: 2900, Periods: 10}}}}},
			{Body: &streamv1.AgentMessage_Hello{Hello: &streamv1.Hello{NodeName: fuzzNode, KernelNs: 9e9, StartedAtUnixNs: 7}}},
			oom(1, "6f1c2b3a-9d4e-4f5a-8b6c-00000000000f", "app")},
		// Broken ones: an unknown index, a reused one, a container the pod
		// does not have, counters that go backwards, an empty message.
		{hello(fuzzNode), counters(1e9, &streamv1.ContainerCounters{Index: 9, Periods: 1})},
		{hello(fuzzNode), counters(1e9, &streamv1.ContainerCounters{Index: 1, PodUid: string(fuzzPodA), Container: "app"}),
			counters(2e9, &streamv1.ContainerCounters{Index: 1, PodUid: string(fuzzPodA), Container: "app"})},
		{hello(fuzzNode), counters(1e9, &streamv1.ContainerCounters{Index: 1, PodUid: string(fuzzPodA), Container: "nope"}), oom(1, fuzzPodA, "nope")},
		{hello(fuzzNode), counters(2e9, &streamv1.ContainerCounters{Index: 1, PodUid: string(fuzzPodA), Container: "app"}),
			counters(1e9, &streamv1.ContainerCounters{Index: 1})},
		{hello(fuzzNode), {}},
	}
	add := func(msgs ...*streamv1.AgentMessage) {
		e := encodeAll(msgs...)
		f.Add(e[0], e[1], e[2], e[3], e[4], e[5])
	}
	for _, s := range seeds {
		add(s...)
	}
	add(hello(fuzzNode), &streamv1.AgentMessage{}, counters(1))
	f.Fuzz(func(t *testing.T, m0, m1, m2, m3, m4, m5 []byte) {
		now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
		srv := newFuzzServer(t, &now)
		var st *fuzzStream
		open := func(h *streamv1.Hello) {
			if st != nil {
				srv.releaseNode(fuzzNode, st.id)
				checkBounds(t, srv, st.in, false)
			}
			id, err := srv.claimNode(fuzzNode, func(error) {})
			if err != nil {
				t.Fatalf("claim node: %v", err)
			}
			st = &fuzzStream{in: newIngest(srv, fuzzNode, h), id: id}
		}
		closed := false
		for _, b := range [][]byte{m0, m1, m2, m3, m4, m5} {
			if len(b) == 0 {
				continue // no message
			}
			var msg streamv1.AgentMessage
			if proto.Unmarshal(b, &msg) != nil {
				return // gRPC refuses a message that does not decode
			}
			now = now.Add(time.Second)
			if h := msg.GetHello(); h != nil {
				if h.GetNodeName() != fuzzNode {
					continue // refused at the handshake (node_mismatch)
				}
				open(h)
				closed = false
				continue
			}
			if st == nil {
				open(&streamv1.Hello{NodeName: fuzzNode})
			}
			if closed {
				continue // the stream ended; the next Hello opens another
			}
			err := dispatch(st.in, &msg)
			if err != nil {
				var m *malformedError
				if !errors.As(err, &m) {
					t.Fatalf("refused with %T %v, not a malformedError", err, err)
				}
				if m.code != codes.InvalidArgument && m.code != codes.ResourceExhausted {
					t.Fatalf("refused with code %v: %v", m.code, err)
				}
				if !reasonPattern.MatchString(m.reason) || m.msg == "" {
					t.Fatalf("refusal without a reason or message: %q", fmt.Sprint(err))
				}
				closed = true
			}
			checkBounds(t, srv, st.in, true)
			if err == nil {
				srv.nodesMu.Lock()
				listed := len(srv.nodes[fuzzNode].containers)
				srv.nodesMu.Unlock()
				if listed > srv.cfg.MaxContainers {
					t.Fatalf("message accepted with %d container instances listed, limit %d", listed, srv.cfg.MaxContainers)
				}
			}
			st.in.retryPending()
		}
		if st != nil {
			srv.releaseNode(fuzzNode, st.id)
			checkBounds(t, srv, st.in, false)
		}
	})
}
