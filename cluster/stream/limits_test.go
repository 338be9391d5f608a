package stream

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	streamv1 "github.com/kerf-dev/kerf/api/stream/v1"
	"github.com/kerf-dev/kerf/cluster/signals"
)

type agentClient = grpc.BidiStreamingClient[streamv1.AgentMessage, streamv1.LeaderMessage]

// ended is how a stream ended, as its reader saw it.
type ended struct {
	err error
	// resync is set when the leader asked for a snapshot first.
	resync bool
}

// drain reads st until it ends, in a goroutine, so that the leader's acks
// never block it.
func drain(st agentClient) <-chan ended {
	out := make(chan ended, 1)
	go func() {
		var e ended
		for {
			m, err := st.Recv()
			if err != nil {
				e.err = err
				out <- e
				return
			}
			if m.GetResync() != nil {
				e.resync = true
			}
		}
	}()
	return out
}

// endedWithin waits for a drained stream to end.
func endedWithin(t *testing.T, ch <-chan ended, d time.Duration) (ended, bool) {
	t.Helper()
	select {
	case e := <-ch:
		return e, true
	case <-time.After(d):
		return ended{}, false
	}
}

// TestAnOpenStreamHoldsNoGoroutineBetweenReviews: an open stream's
// token is reviewed from a timer's callback, so no goroutine of the
// stream's waits for the next review (before, one did per stream: 1,000
// of the leader's 6,000 goroutines at 1,000 nodes, a stack each).
// TestRevokedTokenClosesTheOpenStream checks that the reviews still come.
func TestAnOpenStreamHoldsNoGoroutineBetweenReviews(t *testing.T) {
	f := newFixture(t)
	st := f.connect(t, f.agentToken)
	send(st, hello("node-a"), oom(1, f.podA, "app"))
	assert.Equal(t, uint64(1), recvAck(t, st).GetOomSeq())
	var stacks strings.Builder
	require.NoError(t, pprof.Lookup("goroutine").WriteTo(&stacks, 1))
	assert.True(t, strings.Contains(stacks.String(), "stream.(*Server).Connect"), "the stream is open")
	assert.False(t, strings.Contains(stacks.String(), "stream.(*Server).reauthenticate"), "a goroutine waits for the next review")
}

func TestRevokedTokenClosesTheOpenStream(t *testing.T) {
	f := newFixture(t, func(c *Config, _ *cache.Options) { c.ReauthEvery = 500 * time.Millisecond })
	st := f.connect(t, f.agentToken)
	send(st, hello("node-a"), oom(1, f.podA, "app"))
	assert.Equal(t, uint64(1), recvAck(t, st).GetOomSeq())
	revoked := f.srv.metrics.errors.WithLabelValues("token_revoked")
	before := testutil.ToFloat64(revoked)

	// The token is bound to the agent's pod: deleting the pod revokes it.
	require.NoError(t, f.cs.CoreV1().Pods(f.namespace).Delete(t.Context(), f.agentPod, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}))
	start := time.Now()
	// The bound: ReauthEvery, plus the apiserver's own cache of
	// authenticated tokens (10 s).
	e, ok := endedWithin(t, drain(st), 20*time.Second)
	require.True(t, ok, "the stream of a revoked token is still open after 20 s")
	assert.Equal(t, codes.Unauthenticated, status.Code(e.err), "%v", e.err)
	assert.Contains(t, e.err.Error(), "no longer authenticates")
	t.Logf("the stream closed %s after its token was revoked", time.Since(start).Round(time.Millisecond))
	assert.Less(t, time.Since(start), 12*time.Second, "closed within ReauthEvery and the apiserver's token cache")
	assert.Equal(t, before+1, testutil.ToFloat64(revoked))

	// And it cannot come back, the positive review cache notwithstanding.
	st = f.connect(t, f.agentToken)
	send(st, hello("node-a"))
	assert.Equal(t, codes.Unauthenticated, closedWith(t, st))
}

// tokenReviews is the apiserver's count of TokenReviews it served
// (apiserver_request_total{resource="tokenreviews"}).
func tokenReviews(t *testing.T, cs kubernetes.Interface) float64 {
	t.Helper()
	raw, err := cs.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(t.Context())
	require.NoError(t, err)
	sum := 0.0
	sc := bufio.NewScanner(bytes.NewReader(raw))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "apiserver_request_total{") || !strings.Contains(line, `resource="tokenreviews"`) {
			continue
		}
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		require.NoError(t, err, line)
		sum += v
	}
	require.NoError(t, sc.Err())
	return sum
}

// TestFailingSourcesAreBounded fills the failure budgets past maxSources:
// the source that failed longest ago is forgotten (and starts afresh),
// the others keep their debt.
func TestFailingSourcesAreBounded(t *testing.T) {
	var f failingSources
	now := time.Unix(1000, 0)
	const rate, burst = 1, 2
	for range burst {
		f.fail("10.0.0.1", now, rate, burst)
	}
	require.True(t, f.penalized("10.0.0.1", now), "burst spent")
	assert.False(t, f.penalized("10.0.0.1", now.Add(time.Second)), "one failure refilled after 1 s")
	assert.False(t, f.penalized("10.9.9.9", now), "a source that never failed is not penalized")
	for i := range maxSources - 1 {
		ip := fmt.Sprintf("10.1.%d.%d", i/256, i%256)
		f.fail(ip, now, rate, burst)
		f.fail(ip, now, rate, burst)
	}
	assert.Equal(t, maxSources, f.len())
	assert.True(t, f.penalized("10.0.0.1", now))
	f.fail("10.2.0.1", now, rate, burst)
	assert.Equal(t, maxSources, f.len(), "bounded")
	assert.False(t, f.penalized("10.0.0.1", now), "the source that failed longest ago is forgotten")
	assert.True(t, f.penalized("10.1.0.0", now), "the others keep their debt")
}

func TestOOMEventAboutAPodNotCachedYetIsCountedOnceItAppears(t *testing.T) {
	// The leader's cache lags: it holds no pod labelled hidden, so
	// removing the label is the pod reaching it.
	hidden, err := labels.Parse("!kerf.dev/hidden")
	require.NoError(t, err)
	f := newFixture(t, func(_ *Config, o *cache.Options) {
		o.ByObject = map[client.Object]cache.ByObject{&corev1.Pod{}: {Label: hidden}}
	})
	late, err := f.cs.CoreV1().Pods(f.namespace).Create(t.Context(), &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "late", Namespace: f.namespace, Labels: map[string]string{"kerf.dev/hidden": "true"}},
		Spec: corev1.PodSpec{NodeName: "node-a", AutomountServiceAccountToken: ptr.To(false),
			Containers: []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10"}}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	past, future := time.Now().Add(-time.Hour), time.Now().Add(time.Hour)

	st := f.connect(t, f.agentToken)
	h := hello("node-a")
	h.GetHello().StartedAtUnixNs = 42
	send(st, h, oom(1, late.UID, "app"))
	assert.Equal(t, uint64(1), recvAck(t, st).GetOomSeq(), "acknowledged: the leader keeps it")
	kills, _ := f.memory.OOMKills(late.UID, "app", past, future)
	assert.Zero(t, kills, "not counted before the pod is known")
	assert.Equal(t, 1.0, testutil.ToFloat64(f.srv.metrics.pending))
	// The agent resends it (its ack was lost): still one event.
	send(st, oom(1, late.UID, "app"))
	assert.Equal(t, uint64(1), recvAck(t, st).GetOomSeq())

	_, err = f.cs.CoreV1().Pods(f.namespace).Patch(t.Context(), late.Name, types.MergePatchType,
		[]byte(`{"metadata":{"labels":{"kerf.dev/hidden":null}}}`), metav1.PatchOptions{})
	require.NoError(t, err)
	assert.Eventually(t, func() bool {
		kills, _ := f.memory.OOMKills(late.UID, "app", past, future)
		return kills == 1
	}, 10*time.Second, 50*time.Millisecond, "the kill is counted once the pod is in the cache")
	assert.Equal(t, 0.0, testutil.ToFloat64(f.srv.metrics.pending))
	assert.Equal(t, 1.0, testutil.ToFloat64(f.srv.metrics.pendingCounted))
	time.Sleep(2 * pendingRetry)
	kills, _ = f.memory.OOMKills(late.UID, "app", past, future)
	assert.Equal(t, 1, kills, "counted once")
}

func TestPendingOOMEventsExpire(t *testing.T) {
	f := newFixture(t, func(c *Config, _ *cache.Options) { c.PendingOOMTTL, c.MaxPendingOOM = time.Second, 2 })
	st := f.connect(t, f.agentToken)
	send(st, hello("node-a"), oom(1, "no-such-pod-1", "app"), oom(2, "no-such-pod-2", "app"), oom(3, "no-such-pod-3", "app"))
	for range 3 {
		recvAck(t, st)
	}
	assert.Equal(t, 2.0, testutil.ToFloat64(f.srv.metrics.pending), "MaxPendingOOM")
	assert.Equal(t, 1.0, testutil.ToFloat64(f.srv.metrics.expired.WithLabelValues("full")))
	assert.Eventually(t, func() bool { return testutil.ToFloat64(f.srv.metrics.expired.WithLabelValues("ttl")) == 2 },
		5*time.Second, 50*time.Millisecond)
	assert.Equal(t, 0.0, testutil.ToFloat64(f.srv.metrics.pending))
}

// heapAlloc is the live heap after a collection.
func heapAlloc() uint64 {
	var ms runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// TestHostileStreamIsClosedAndLeavesNoMemory is a compromised node (its
// agent's token in hand) sending the worst it can, a bounded number of
// messages in all: huge and made-up container names, OOM counts past the
// limit and floods of OOM events, new container instances every message,
// never gone, never a snapshot. Each stream is closed with an error naming
// the limit and counted, and once they are gone the leader's heap is back
// within a few MiB of where it was.
func TestHostileStreamIsClosedAndLeavesNoMemory(t *testing.T) {
	f := newFixture(t, func(c *Config, _ *cache.Options) {
		c.Kernel = signals.NewKernel(signals.WithCompaction(signals.DefaultRecent))
	})
	errs := func(reason string) float64 { return testutil.ToFloat64(f.srv.metrics.errors.WithLabelValues(reason)) }
	// Warm up: a stream opened and closed, so lazily built state is in
	// the baseline.
	st := f.connect(t, f.agentToken)
	send(st, hello("node-a"), oom(1, f.podA, "app"))
	recvAck(t, st)
	require.NoError(t, st.CloseSend())
	closedWith(t, st)
	before := heapAlloc()
	startedAt := int64(1000)
	// hostile opens a stream as a new agent incarnation and sends msgs
	// (made as they go, fast), and returns how it ended, which must be
	// within 5 s.
	hostile := func(t *testing.T, msgs func(yield func(*streamv1.AgentMessage) bool)) ended {
		t.Helper()
		startedAt++
		deadline := time.Now().Add(5 * time.Second)
		conn, err := grpc.NewClient(f.addr, grpc.WithTransportCredentials(f.creds))
		require.NoError(t, err)
		defer func() { _ = conn.Close() }()
		ctx, cancel := context.WithDeadline(metadata.AppendToOutgoingContext(t.Context(), "authorization", "Bearer "+f.agentToken), deadline)
		defer cancel()
		st, err := streamv1.NewStreamClient(conn).Connect(ctx)
		require.NoError(t, err)
		done := drain(st)
		h := hello("node-a")
		h.GetHello().StartedAtUnixNs = startedAt
		if st.Send(h) == nil {
			for m := range msgs {
				if st.Send(m) != nil {
					break
				}
			}
		}
		e, ok := endedWithin(t, done, time.Until(deadline)+time.Second)
		require.True(t, ok, "the hostile stream was never closed")
		if status.Code(e.err) == codes.DeadlineExceeded {
			t.Errorf("the hostile stream was still open after 5 s")
		}
		return e
	}
	identity := func(idx uint32, name string, started int64) *streamv1.ContainerCounters {
		return &streamv1.ContainerCounters{Index: idx, PodUid: string(f.podA), Container: name, StartedAtUnixNs: started, Periods: 1}
	}
	one := func(c *streamv1.ContainerCounters) func(func(*streamv1.AgentMessage) bool) {
		return func(yield func(*streamv1.AgentMessage) bool) { yield(counters(1, c)) }
	}
	expect := func(t *testing.T, e ended, code codes.Code, reason, mention string, errsBefore float64) {
		t.Helper()
		assert.Equal(t, code, status.Code(e.err), "%v", e.err)
		assert.Contains(t, status.Convert(e.err).Message(), mention)
		assert.Equal(t, errsBefore+1, errs(reason), "kerf_stream_errors_total{reason=%q}", reason)
	}

	t.Run("HugeName", func(t *testing.T) {
		b := errs("field_too_long")
		e := hostile(t, one(identity(1, strings.Repeat("x", 1<<20), 1)))
		expect(t, e, codes.InvalidArgument, "field_too_long", "MaxContainerNameBytes", b)
	})
	t.Run("NamesNotInThePod", func(t *testing.T) {
		// Each is refused alone (dropped, counted): a real agent whose
		// names disagree with the cache must not be locked out. Past
		// MaxUnknownContainers on one stream, the stream is closed.
		b, dropped := errs("too_many_unknown_containers"), testutil.ToFloat64(f.srv.metrics.dropped.WithLabelValues(DropContainerUnknown))
		e := hostile(t, func(yield func(*streamv1.AgentMessage) bool) {
			for i := range uint32(1000) {
				m := counters(1, identity(i, fmt.Sprintf("made-up-%d-%s", i, strings.Repeat("x", 40)), 1))
				if i%2 == 1 {
					m = oom(uint64(i), f.podA, fmt.Sprintf("made-up-%d", i))
				}
				if !yield(m) {
					return
				}
			}
		})
		expect(t, e, codes.ResourceExhausted, "too_many_unknown_containers", "MaxUnknownContainers", b)
		assert.Equal(t, dropped+MaxUnknownContainers+1, testutil.ToFloat64(f.srv.metrics.dropped.WithLabelValues(DropContainerUnknown)))
		_, ok := f.memory.OOMKills(f.podA, "made-up-1", time.Time{}, time.Now().Add(time.Hour))
		assert.False(t, ok, "nothing is kept under a made-up name")
	})
	t.Run("OOMCountOf2To31", func(t *testing.T) {
		b := errs("oom_count_too_large")
		e := hostile(t, func(yield func(*streamv1.AgentMessage) bool) {
			m := oom(1, f.podA, "app")
			m.GetOomEvent().Count = 1 << 31
			yield(m)
		})
		expect(t, e, codes.InvalidArgument, "oom_count_too_large", "MaxOOMCount", b)
	})
	t.Run("OOMFlood", func(t *testing.T) {
		// 3,000 events of the most kills each, at distinct times: kept as
		// MaxKillsPerPod records. The stream stays open (these are
		// reports the leader accepts); the client ends it.
		b := errs("empty_message")
		e := hostile(t, func(yield func(*streamv1.AgentMessage) bool) {
			for i := range uint64(3000) {
				m := oom(i+1, f.podA, "app")
				m.GetOomEvent().Count = streamv1.MaxOOMCount
				m.GetOomEvent().KernelNs = 1e9 + i
				if !yield(m) {
					return
				}
			}
			yield(&streamv1.AgentMessage{}) // an empty message ends it
		})
		expect(t, e, codes.InvalidArgument, "empty_message", "no body", b)
	})
	t.Run("NewContainersEveryMessageNeverGone", func(t *testing.T) {
		// Five streams, each indexing new instances until it is closed.
		for range 5 {
			b := errs("too_many_containers")
			base := startedAt * 1e6
			e := hostile(t, func(yield func(*streamv1.AgentMessage) bool) {
				for m := range uint32(100) {
					c := counters(1)
					for k := range uint32(100) {
						i := m*100 + k
						c.GetCounters().Containers = append(c.GetCounters().Containers, identity(i, "app", base+int64(i)))
					}
					if !yield(c) {
						return
					}
				}
			})
			expect(t, e, codes.ResourceExhausted, "too_many_containers", "MaxContainers", b)
		}
	})
	t.Run("NewIndexesEveryMessageWithoutSnapshot", func(t *testing.T) {
		// Each message gives 100 new indexes and says the previous 100
		// are gone: the table stays small, the indexes used grow.
		b := errs("too_many_indexes")
		base := startedAt * 1e6
		e := hostile(t, func(yield func(*streamv1.AgentMessage) bool) {
			for m := range uint32(1000) {
				c := counters(1)
				for k := range uint32(100) {
					i := m*100 + k
					c.GetCounters().Containers = append(c.GetCounters().Containers, identity(i, "app", base+int64(i)))
					if m > 0 {
						c.GetCounters().Gone = append(c.GetCounters().Gone, i-100)
					}
				}
				if !yield(c) {
					return
				}
			}
		})
		assert.True(t, e.resync, "the leader asked for a snapshot first")
		expect(t, e, codes.ResourceExhausted, "too_many_indexes", "since the last snapshot", b)
	})

	assert.Eventually(t, func() bool { return testutil.ToFloat64(f.srv.metrics.streams) == 0 }, 10*time.Second, 50*time.Millisecond)
	// The closed connections' transports finish in the background.
	time.Sleep(time.Second)
	after := heapAlloc()
	pods, instances, samples := f.memory.Len()
	grew := int64(after) - int64(before)
	t.Logf("leader heap before %.1f MiB, after the hostile streams %.1f MiB (%+.2f MiB); Kernel: %d pods, %d instances, %d samples",
		float64(before)/(1<<20), float64(after)/(1<<20), float64(grew)/(1<<20), pods, instances, samples)
	assert.LessOrEqual(t, instances, signals.MaxInstancesPerPod+1, "the Kernel's instances of the pod are bounded")
	assert.Less(t, grew, int64(4<<20), "the leader's heap is back within 4 MiB")
}
