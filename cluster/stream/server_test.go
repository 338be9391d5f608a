package stream

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/cache"

	streamv1 "github.com/kerf-dev/kerf/api/stream/v1"
	"github.com/kerf-dev/kerf/cluster/signals"
	"github.com/kerf-dev/kerf/internal/kube"
	"github.com/kerf-dev/kerf/test/controlplane"
	"github.com/kerf-dev/kerf/test/streamtest"
)

const testAudience = "kerf-leader"

// TestMain shares one control plane among the package's tests
// (controlplane.Get): a start costs seconds.
func TestMain(m *testing.M) { controlplane.Main(m, controlplane.Hooks{}) }

// fixture is a leader's stream server on 127.0.0.1 in front of a real
// apiserver, with an agent pod on node-a and workload pods on node-a and
// node-b.
type fixture struct {
	srv      *Server
	memory   *signals.Kernel
	statuses *signals.AgentStatuses
	usage    *signals.Usage
	leading  *atomic.Bool
	addr     string
	creds    credentials.TransportCredentials

	// namespace holds the agent's service account and pod (agentPod);
	// cs is the apiserver's admin client.
	namespace, agentPod string
	cs                  kubernetes.Interface

	podA, podB types.UID
	// agentToken is bound to the agent pod on node-a; wrongAudience is
	// the same but for another audience; otherSA is another service
	// account's.
	// unbound is the agent service account's but bound to no pod.
	agentToken, wrongAudience, otherSA, unbound string
	// serverTLS is the server's TLS config, to serve more servers with.
	serverTLS *tls.Config
}

// fixtureOption changes the fixture's server config or pod cache before
// they are built.
type fixtureOption func(*Config, *cache.Options)

func newFixture(t *testing.T, opts ...fixtureOption) *fixture {
	t.Helper()
	cp := controlplane.Get(t)
	cs := cp.Clientset
	ctx := t.Context()
	f := &fixture{memory: signals.NewKernel(), statuses: signals.NewAgentStatuses(0), usage: signals.NewUsage(0), leading: &atomic.Bool{}}
	f.leading.Store(true)

	// A namespace of its own, as kerf-system would be: the fixture can be
	// built again on the same control plane (go test -count=N).
	created, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "kerf-system-"}}, metav1.CreateOptions{})
	require.NoError(t, err)
	testNamespace := created.Name
	f.namespace, f.agentPod, f.cs = testNamespace, "kerf-agent-a", cs
	for _, sa := range []string{"kerf-agent", "other"} {
		_, err := cs.CoreV1().ServiceAccounts(testNamespace).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	agent := streamtest.CreatePod(t, cs, testNamespace, "kerf-agent-a", "node-a", "kerf-agent")
	f.podA = streamtest.CreatePod(t, cs, testNamespace, "app-a", "node-a", "").UID
	f.podB = streamtest.CreatePod(t, cs, testNamespace, "app-b", "node-b", "").UID

	f.agentToken = streamtest.CreateToken(t, cs, testNamespace, "kerf-agent", testAudience, agent)
	f.wrongAudience = streamtest.CreateToken(t, cs, testNamespace, "kerf-agent", "someone-else", agent)
	f.otherSA = streamtest.CreateToken(t, cs, testNamespace, "other", testAudience, nil)
	f.unbound = streamtest.CreateToken(t, cs, testNamespace, "kerf-agent", testAudience, nil)

	// The pods as the leader reads them: its cache, indexed by UID.
	cfg := Config{
		Audience:           testAudience,
		ServiceAccountName: "kerf-agent",
		Clientset:          cs,
		Kernel:             f.memory,
		Statuses:           f.statuses,
		Usage:              f.usage,
		Leading:            f.leading.Load,
		Registerer:         prometheus.NewRegistry(),
		Log:                slog.New(slog.NewTextHandler(streamtest.LogWriter(t), nil)),
	}
	cacheOpts := cache.Options{Scheme: kube.Scheme}
	for _, o := range opts {
		o(&cfg, &cacheOpts)
	}
	f.memory = cfg.Kernel
	podCache, err := cache.New(cp.Config, cacheOpts)
	require.NoError(t, err)
	require.NoError(t, IndexPodsByUID(ctx, podCache))
	cacheCtx, stopCache := context.WithCancel(context.Background())
	cacheDone := make(chan struct{})
	go func() { defer close(cacheDone); _ = podCache.Start(cacheCtx) }()
	t.Cleanup(func() { stopCache(); <-cacheDone })
	require.True(t, podCache.WaitForCacheSync(ctx), "the pod cache never synced")
	pods := CachedPods{Reader: podCache}

	cfg.ServiceAccountNamespace, cfg.Pods = testNamespace, pods
	f.srv, err = New(cfg)
	require.NoError(t, err)

	serverTLS, pool := streamtest.SelfSigned(t)
	f.serverTLS = serverTLS
	g := NewGRPCServer(f.srv, serverTLS)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)
	f.addr = lis.Addr().String()
	f.creds = credentials.NewTLS(&tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS13})
	return f
}

// connect opens a stream with token (none when empty).
func (f *fixture) connect(t *testing.T, token string) grpc.BidiStreamingClient[streamv1.AgentMessage, streamv1.LeaderMessage] {
	t.Helper()
	conn, err := grpc.NewClient(f.addr, grpc.WithTransportCredentials(f.creds))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	if token != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
	}
	st, err := streamv1.NewStreamClient(conn).Connect(ctx)
	require.NoError(t, err)
	return st
}

// send sends msgs, ignoring errors: the server may already have closed
// the stream, which Recv reports.
func send(st grpc.BidiStreamingClient[streamv1.AgentMessage, streamv1.LeaderMessage], msgs ...*streamv1.AgentMessage) {
	for _, m := range msgs {
		if st.Send(m) != nil {
			return
		}
	}
}

// closedWith reads until the stream ends and returns its status code.
func closedWith(t *testing.T, st grpc.BidiStreamingClient[streamv1.AgentMessage, streamv1.LeaderMessage]) codes.Code {
	t.Helper()
	for {
		_, err := st.Recv()
		if errors.Is(err, io.EOF) {
			return codes.OK
		}
		if err != nil {
			return status.Code(err)
		}
	}
}

func hello(node string) *streamv1.AgentMessage {
	return &streamv1.AgentMessage{Body: &streamv1.AgentMessage_Hello{Hello: &streamv1.Hello{NodeName: node, BootId: "boot-1", FullSnapshot: true}}}
}

func counters(kernelNs uint64, cs ...*streamv1.ContainerCounters) *streamv1.AgentMessage {
	return &streamv1.AgentMessage{Body: &streamv1.AgentMessage_Counters{Counters: &streamv1.Counters{KernelNs: kernelNs, Containers: cs}}}
}

func oom(seq uint64, pod types.UID, container string) *streamv1.AgentMessage {
	return &streamv1.AgentMessage{Body: &streamv1.AgentMessage_OomEvent{OomEvent: &streamv1.OOMEvent{Seq: seq, PodUid: string(pod), Container: container, KernelNs: 5e9, Count: 1}}}
}

func containerEvent(seq uint64, pod types.UID, container string, restarts int32, reason string) *streamv1.AgentMessage {
	ev := &streamv1.ContainerEvent{Seq: seq, PodUid: string(pod), Container: container, RestartCount: restarts, KernelNs: 5e9}
	if reason != "" {
		ev.Terminated = &streamv1.Termination{Reason: reason, ExitCode: 137, ContainerId: "containerd://run-" + fmt.Sprint(restarts),
			FinishedAtUnixNs: time.Now().UnixNano()}
	}
	return &streamv1.AgentMessage{Body: &streamv1.AgentMessage_ContainerEvent{ContainerEvent: ev}}
}

// recvAck reads the next message, which must be an Ack, and returns it.
func recvAck(t *testing.T, st grpc.BidiStreamingClient[streamv1.AgentMessage, streamv1.LeaderMessage]) *streamv1.Ack {
	t.Helper()
	msg, err := st.Recv()
	require.NoError(t, err)
	require.NotNil(t, msg.GetAck(), "want an Ack, got %v", msg)
	return msg.GetAck()
}

func TestStream(t *testing.T) {
	f := newFixture(t)
	past, future := time.Now().Add(-time.Hour), time.Now().Add(time.Hour)

	t.Run("IngestsReportsAboutPodsOnTheAgentsNode", func(t *testing.T) {
		st := f.connect(t, f.agentToken)
		// The agent says hello at kernel time 3 s and sends two passes it
		// sampled before (at 1 s and 2 s), as after an outage.
		h := hello("node-a")
		h.GetHello().KernelNs = 3e9
		send(st,
			h,
			counters(1e9, &streamv1.ContainerCounters{Index: 1, PodUid: string(f.podA), Container: "app", StartedAtUnixNs: 1, Periods: 100, Throttled: 10}),
			counters(2e9, &streamv1.ContainerCounters{Index: 1, Periods: 50, Throttled: 5}),
			oom(7, f.podA, "app"),
		)
		assert.Equal(t, uint64(7), recvAck(t, st).GetOomSeq())
		assert.Equal(t, 1.0, testutil.ToFloat64(f.srv.metrics.connected))

		kills, ok := f.memory.OOMKills(f.podA, "app", past, future)
		assert.True(t, ok)
		assert.Equal(t, 1, kills)
		samples, err := f.memory.Samples([]types.UID{f.podA}, past, future)
		require.NoError(t, err)
		require.Len(t, samples, 2)
		assert.Equal(t, uint64(150), samples[1].Periods, "deltas are summed into absolute counters")
		assert.Equal(t, uint64(15), samples[1].Throttled)
		assert.Equal(t, time.Second, samples[1].At.Sub(samples[0].At), "kernel distances are kept")
		assert.Equal(t, 2.0, testutil.ToFloat64(f.srv.metrics.samples))

		send(st, oom(7, f.podA, "app"))
		assert.Equal(t, uint64(7), recvAck(t, st).GetOomSeq(), "a resent event is acknowledged again")
		kills, _ = f.memory.OOMKills(f.podA, "app", past, future)
		assert.Equal(t, 1, kills, "a resent event is not counted twice")

		require.NoError(t, st.CloseSend())
		assert.Equal(t, codes.OK, closedWith(t, st))
	})

	t.Run("AKillNeverMapsAfterItArrived", func(t *testing.T) {
		// The Hello was anchored late (its transit and the TokenReview
		// came between): mapped through it alone, the kill (kernel 5 s,
		// Hello at 1 s) would land 4 s after it arrived, and a health watch
		// evaluating at once would not count it.
		start := time.Now()
		st := f.connect(t, f.agentToken)
		h := hello("node-a")
		h.GetHello().KernelNs = 1e9
		send(st, h, oom(100, f.podA, "app"))
		assert.Equal(t, uint64(100), recvAck(t, st).GetOomSeq())
		kills, _ := f.memory.OOMKills(f.podA, "app", start, time.Now())
		assert.Equal(t, 1, kills, "the kill is counted by a watch evaluating when it arrives")
		require.NoError(t, st.CloseSend())
	})

	t.Run("DropsReportsAboutPodsOnOtherNodes", func(t *testing.T) {
		notOnNode := f.srv.metrics.dropped.WithLabelValues(DropPodNotOnNode)
		unknown := f.srv.metrics.dropped.WithLabelValues(DropPodUnknown)
		before, beforeUnknown := testutil.ToFloat64(notOnNode), testutil.ToFloat64(unknown)
		st := f.connect(t, f.agentToken)
		send(st,
			hello("node-a"),
			counters(1e9,
				&streamv1.ContainerCounters{Index: 1, PodUid: string(f.podB), Container: "app", Periods: 100, Throttled: 10},
				&streamv1.ContainerCounters{Index: 2, PodUid: "no-such-pod", Container: "app", Periods: 100, Throttled: 10},
			),
			oom(1, f.podB, "app"),
		)
		assert.Equal(t, uint64(1), recvAck(t, st).GetOomSeq(), "a dropped OOM event is still acknowledged")
		assert.Equal(t, before+2, testutil.ToFloat64(notOnNode))
		assert.Equal(t, beforeUnknown+1, testutil.ToFloat64(unknown))
		_, ok := f.memory.OOMKills(f.podB, "app", past, future)
		assert.False(t, ok, "nothing about the node-b pod is ingested")
	})

	t.Run("ContainerEventsAreKeptAndAcknowledged", func(t *testing.T) {
		var seen atomic.Int32
		cancel := f.statuses.Subscribe(func(signals.Signal) { seen.Add(1) })
		defer cancel()
		st := f.connect(t, f.agentToken)
		send(st, hello("node-a"), containerEvent(1, f.podA, "app", 1, "OOMKilled"))
		assert.Equal(t, uint64(1), recvAck(t, st).GetEventSeq())
		got, ok := f.statuses.AgentStatus(f.podA, "app")
		require.True(t, ok)
		assert.Equal(t, int32(1), got.RestartCount)
		require.Len(t, got.Terminations, 1)
		assert.Equal(t, "OOMKilled", got.Terminations[0].Reason)
		assert.Equal(t, "containerd://run-1", got.Terminations[0].ContainerID)

		send(st, containerEvent(1, f.podA, "app", 1, "OOMKilled"))
		assert.Equal(t, uint64(1), recvAck(t, st).GetEventSeq(), "a resent event is acknowledged again")
		// The same event on a new stream (its ack was lost) changes
		// nothing either.
		st2 := f.connect(t, f.agentToken)
		send(st2, hello("node-a"), containerEvent(1, f.podA, "app", 1, "OOMKilled"))
		assert.Equal(t, uint64(1), recvAck(t, st2).GetEventSeq())
		got, _ = f.statuses.AgentStatus(f.podA, "app")
		assert.Len(t, got.Terminations, 1, "one run, however often it is sent")
		assert.Equal(t, int32(1), seen.Load(), "only the first event told the watch something new")
		assert.Equal(t, 1.0, testutil.ToFloat64(f.srv.metrics.events.WithLabelValues("new")))
		assert.Equal(t, 1.0, testutil.ToFloat64(f.srv.metrics.events.WithLabelValues("known")))
	})

	t.Run("DropsContainerEventsAboutOtherNodesPods", func(t *testing.T) {
		notOnNode := f.srv.metrics.dropped.WithLabelValues(DropPodNotOnNode)
		unknownContainer := f.srv.metrics.dropped.WithLabelValues(DropContainerUnknown)
		before, beforeContainer := testutil.ToFloat64(notOnNode), testutil.ToFloat64(unknownContainer)
		st := f.connect(t, f.agentToken)
		send(st, hello("node-a"), containerEvent(1, f.podB, "app", 5, "OOMKilled"))
		assert.Equal(t, uint64(1), recvAck(t, st).GetEventSeq(), "a dropped event is still acknowledged")
		send(st, containerEvent(2, f.podA, "no-such-container", 5, "OOMKilled"))
		assert.Equal(t, uint64(2), recvAck(t, st).GetEventSeq())
		assert.Equal(t, before+1, testutil.ToFloat64(notOnNode))
		assert.Equal(t, beforeContainer+1, testutil.ToFloat64(unknownContainer))
		_, ok := f.statuses.AgentStatus(f.podB, "app")
		assert.False(t, ok, "nothing about the node-b pod is kept")
		_, ok = f.statuses.AgentStatus(f.podA, "no-such-container")
		assert.False(t, ok, "nothing about a container the pod does not have is kept")
	})

	t.Run("UsageReachesTheLeadersStoreUntilTheContainerGoes", func(t *testing.T) {
		st := f.connect(t, f.agentToken)
		// Sent after all of it, so no time is mapped past its arrival.
		h := hello("node-a")
		h.GetHello().KernelNs = 50e9
		usage := func(cpu, ws, peak int64) *streamv1.ContainerUsage {
			return &streamv1.ContainerUsage{CpuNs: uint64(cpu), WorkingSetDelta: ws, PeakDelta: peak}
		}
		gone := counters(31e9)
		gone.GetCounters().Gone = []uint32{1}
		send(st, h,
			// The first usage of the index is absolute; a pass without
			// usage leaves it; the next is relative, memory down too.
			counters(1e9, &streamv1.ContainerCounters{Index: 1, PodUid: string(f.podA), Container: "app", Periods: 10,
				Usage: usage(2e9, 100<<20, 300<<20)}),
			counters(2e9, &streamv1.ContainerCounters{Index: 1, Periods: 10}),
			counters(11e9, &streamv1.ContainerCounters{Index: 1, Periods: 10, Usage: usage(1e9, -20<<20, -180<<20)}),
			oom(1, f.podA, "app"),
		)
		assert.Equal(t, uint64(1), recvAck(t, st).GetOomSeq())
		got := f.usage.Since(f.podA, "app", time.Time{}, nil)
		require.Len(t, got, 2)
		assert.Equal(t, []any{2 * time.Second, uint64(100 << 20), uint64(300 << 20)}, []any{got[0].CPU, got[0].WorkingSet, got[0].Peak})
		assert.Equal(t, []any{3 * time.Second, uint64(80 << 20), uint64(120 << 20)}, []any{got[1].CPU, got[1].WorkingSet, got[1].Peak})
		assert.Equal(t, 10*time.Second, got[1].At.Sub(got[0].At), "kernel distances are kept")

		send(st, gone, oom(2, f.podA, "app"))
		assert.Equal(t, uint64(2), recvAck(t, st).GetOomSeq())
		_, ok := f.usage.Latest(f.podA, "app")
		assert.False(t, ok, "a container gone is forgotten")

		// A working set below zero is a broken message.
		send(st, counters(40e9, &streamv1.ContainerCounters{Index: 2, PodUid: string(f.podA), Container: "app", Usage: usage(1, -1, 0)}))
		assert.Equal(t, codes.InvalidArgument, closedWith(t, st))
	})

	t.Run("SnapshotRestartsTheIndexTable", func(t *testing.T) {
		st := f.connect(t, f.agentToken)
		first := &streamv1.ContainerCounters{Index: 1, PodUid: string(f.podA), Container: "app", Periods: 10}
		snapshot := counters(2e9, first)
		snapshot.GetCounters().Snapshot = true
		send(st, hello("node-a"), counters(1e9, first), snapshot, oom(1, f.podA, "app"))
		assert.Equal(t, uint64(1), recvAck(t, st).GetOomSeq(), "an index given again in a snapshot is not a reuse")
	})

	t.Run("LosingLeadershipEndsOpenStreams", func(t *testing.T) {
		st := f.connect(t, f.agentToken)
		send(st, hello("node-a"), oom(1, f.podA, "app"))
		assert.Equal(t, uint64(1), recvAck(t, st).GetOomSeq())
		f.leading.Store(false)
		defer f.leading.Store(true)
		send(st, oom(2, f.podA, "app"))
		assert.Equal(t, codes.Unavailable, closedWith(t, st))
	})

	many := make([]*streamv1.ContainerCounters, DefaultMaxContainers+1)
	for i := range many {
		many[i] = &streamv1.ContainerCounters{Index: uint32(i), PodUid: string(f.podA), Container: "app"}
	}
	tests := []struct {
		name       string
		token      string
		notLeading bool
		msgs       []*streamv1.AgentMessage
		want       codes.Code
		reason     string
	}{
		{name: "HelloClaimingAnotherNodeIsDenied", token: f.agentToken, msgs: []*streamv1.AgentMessage{hello("node-b")},
			want: codes.PermissionDenied, reason: "node_mismatch"},
		{name: "GarbageTokenIsUnauthenticated", token: "garbage", msgs: []*streamv1.AgentMessage{hello("node-a")},
			want: codes.Unauthenticated, reason: "unauthenticated"},
		{name: "WrongAudienceIsUnauthenticated", token: f.wrongAudience, msgs: []*streamv1.AgentMessage{hello("node-a")},
			want: codes.Unauthenticated, reason: "unauthenticated"},
		{name: "MissingTokenIsUnauthenticated", msgs: []*streamv1.AgentMessage{hello("node-a")},
			want: codes.Unauthenticated, reason: "unauthenticated"},
		{name: "AnotherServiceAccountIsDenied", token: f.otherSA, msgs: []*streamv1.AgentMessage{hello("node-a")},
			want: codes.PermissionDenied, reason: "wrong_service_account"},
		{name: "TokenNotBoundToAPodIsDenied", token: f.unbound, msgs: []*streamv1.AgentMessage{hello("node-a")},
			want: codes.PermissionDenied, reason: "token_not_pod_bound"},
		{name: "FirstMessageMustBeHello", token: f.agentToken, msgs: []*streamv1.AgentMessage{counters(1)},
			want: codes.InvalidArgument, reason: "no_hello"},
		{name: "UnknownIndexIsInvalid", token: f.agentToken,
			msgs: []*streamv1.AgentMessage{hello("node-a"), counters(1, &streamv1.ContainerCounters{Index: 9, Periods: 1})},
			want: codes.InvalidArgument, reason: "unknown_index"},
		{name: "IndexReuseIsInvalid", token: f.agentToken,
			msgs: []*streamv1.AgentMessage{hello("node-a"),
				counters(1, &streamv1.ContainerCounters{Index: 3, PodUid: string(f.podA), Container: "app"}),
				counters(2, &streamv1.ContainerCounters{Index: 3, PodUid: string(f.podA), Container: "app"})},
			want: codes.InvalidArgument, reason: "index_reused"},
		{name: "CountersGoingBackwardsAreInvalid", token: f.agentToken,
			msgs: []*streamv1.AgentMessage{hello("node-a"),
				counters(1, &streamv1.ContainerCounters{Index: 4, PodUid: string(f.podA), Container: "app", Periods: 10}),
				counters(2, &streamv1.ContainerCounters{Index: 4, Periods: ^uint64(0)})},
			want: codes.InvalidArgument, reason: "counters_backwards"},
		{name: "ContainerEventWithoutSeqIsInvalid", token: f.agentToken,
			msgs: []*streamv1.AgentMessage{hello("node-a"), containerEvent(0, f.podA, "app", 1, "")},
			want: codes.InvalidArgument, reason: "missing_seq"},
		{name: "NegativeRestartCountIsInvalid", token: f.agentToken,
			msgs: []*streamv1.AgentMessage{hello("node-a"), containerEvent(1, f.podA, "app", -1, "")},
			want: codes.InvalidArgument, reason: "negative_restart_count"},
		{name: "TerminationWithoutFinishTimeIsInvalid", token: f.agentToken,
			msgs: []*streamv1.AgentMessage{hello("node-a"), {Body: &streamv1.AgentMessage_ContainerEvent{ContainerEvent: &streamv1.ContainerEvent{
				Seq: 1, PodUid: string(f.podA), Container: "app", Terminated: &streamv1.Termination{Reason: "Error"}}}}},
			want: codes.InvalidArgument, reason: "missing_finished_at"},
		{name: "TooManyContainersAreRefused", token: f.agentToken,
			msgs: []*streamv1.AgentMessage{hello("node-a"), counters(1, many...)},
			want: codes.ResourceExhausted, reason: "too_many_containers"},
		{name: "NotLeadingIsUnavailable", token: f.agentToken, notLeading: true, msgs: []*streamv1.AgentMessage{hello("node-a")},
			want: codes.Unavailable, reason: "not_leader"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f.leading.Store(!tt.notLeading)
			defer f.leading.Store(true)
			errs := f.srv.metrics.errors.WithLabelValues(tt.reason)
			before := testutil.ToFloat64(errs)
			st := f.connect(t, tt.token)
			send(st, tt.msgs...)
			assert.Equal(t, tt.want, closedWith(t, st))
			assert.Equal(t, before+1, testutil.ToFloat64(errs), "kerf_stream_errors_total{reason=%q}", tt.reason)
		})
	}

	t.Run("OversizedMessageIsRefused", func(t *testing.T) {
		st := f.connect(t, f.agentToken)
		big := &streamv1.AgentMessage{Body: &streamv1.AgentMessage_OomEvent{OomEvent: &streamv1.OOMEvent{Seq: 1, PodUid: string(f.podA), Container: "app", Comm: string(make([]byte, streamv1.MaxMessageBytes+1))}}}
		send(st, hello("node-a"), big)
		assert.Equal(t, codes.ResourceExhausted, closedWith(t, st))
	})

	t.Run("ClosedStreamsLeaveNoConnectedAgents", func(t *testing.T) {
		assert.Eventually(t, func() bool { return testutil.ToFloat64(f.srv.metrics.connected) == 0 }, 10*time.Second, 50*time.Millisecond)
	})
}

// TestStreamsOpenedTogetherAreReviewedApart: the first review of a
// stream's token comes at a random point of the interval's second half,
// so that the 1,000 streams a failover reopens at once do not send 1,000
// TokenReviews together every interval (all at ReauthEvery before).
func TestStreamsOpenedTogetherAreReviewedApart(t *testing.T) {
	const every = 5 * time.Minute
	seen := map[time.Duration]bool{}
	lo, hi := every, time.Duration(0)
	for range 1000 {
		d := firstReauth(every)
		require.GreaterOrEqual(t, d, every/2)
		require.LessOrEqual(t, d, every, "a revoked token must still close its stream within ReauthEvery")
		seen[d] = true
		lo, hi = min(lo, d), max(hi, d)
	}
	assert.Greater(t, len(seen), 900, "the first reviews are spread")
	assert.Greater(t, hi-lo, every/3, "over most of the interval's second half")
}
