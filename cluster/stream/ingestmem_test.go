package stream

import (
	"fmt"
	"math"
	goruntime "runtime"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	streamv1 "github.com/kerf-dev/kerf/api/stream/v1"
	"github.com/kerf-dev/kerf/cluster/signals"
	"github.com/kerf-dev/kerf/test/controlplane"
)

// podMap is a pod cache in memory: PodByUID returns a copy, as the
// leader's cache reader does.
type podMap map[types.UID]*corev1.Pod

func (m podMap) PodByUID(uid types.UID) (*corev1.Pod, bool) {
	p, ok := m[uid]
	if !ok {
		return nil, false
	}
	return p.DeepCopy(), true
}

// ingestFixture is a stream's ingest on node-a, whose pods are n pods of
// two containers each (app and sidecar), and the snapshot message an agent
// sends of them, encoded as on the wire.
func ingestFixture(t *testing.T, n int) (*ingest, *Server, []byte, []types.UID) {
	t.Helper()
	pods := podMap{}
	uids := make([]types.UID, n)
	for i := range n {
		uid := types.UID(fmt.Sprintf("6f1c2b3a-9d4e-4f5a-8b7c-%012d", i))
		uids[i] = uid
		pods[uid] = &corev1.Pod{ObjectMeta: metav1.ObjectMeta{UID: uid, Namespace: "scale-000", Name: fmt.Sprintf("w-%05d-0", i)},
			Spec: corev1.PodSpec{NodeName: "node-a", Containers: []corev1.Container{{Name: "app"}, {Name: "sidecar"}}}}
	}
	srv, err := New(Config{Audience: testAudience, ServiceAccountNamespace: "kerf-system", ServiceAccountName: "kerf-agent",
		Clientset: controlplane.Get(t).Clientset, Pods: pods, Kernel: signals.NewKernel(), Usage: signals.NewUsage(0),
		Leading: func() bool { return true }, Limits: Limits{MaxContainers: 2 * n}})
	require.NoError(t, err)
	c := &streamv1.Counters{KernelNs: 1e9, Snapshot: true}
	for i, uid := range uids {
		for j, name := range []string{"app", "sidecar"} {
			c.Containers = append(c.Containers, &streamv1.ContainerCounters{Index: uint32(2*i + j + 1), PodUid: string(uid), Container: name,
				StartedAtUnixNs: int64(1e18 + i), Periods: 100, Throttled: 10,
				Usage: &streamv1.ContainerUsage{CpuNs: 1e9, WorkingSetDelta: 64 << 20, PeakDelta: 80 << 20}})
		}
	}
	raw, err := proto.Marshal(c)
	require.NoError(t, err)
	return newIngest(srv, "node-a", &streamv1.Hello{NodeName: "node-a"}), srv, raw, uids
}

// TestIngestSharesTheNamesOfAPod: the containers a stream indexes share
// one copy of their pod's UID and of each name, the stream's cache's, not
// each its own from the message; and the instance is as it was sent.
func TestIngestSharesTheNamesOfAPod(t *testing.T) {
	in, _, raw, uids := ingestFixture(t, 2)
	var c streamv1.Counters
	require.NoError(t, proto.Unmarshal(raw, &c))
	_, err := in.counters(&c)
	require.NoError(t, err)
	app, side, other := in.table[1], in.table[2], in.table[3]
	require.NotNil(t, app)
	assert.Equal(t, uids[0], app.podUID)
	assert.Equal(t, "sidecar", side.name)
	assert.Equal(t, int64(1e18), app.startedNs)
	assert.Equal(t, instanceKey{uids[0], "app", 1e18}, app.key())
	assert.Same(t, unsafe.StringData(string(app.podUID)), unsafe.StringData(string(side.podUID)), "the two containers of a pod share its UID")
	assert.Same(t, unsafe.StringData(app.name), unsafe.StringData(other.name), "the app containers of two pods share the name")
	assert.LessOrEqual(t, unsafe.Sizeof(container{}), uintptr(112), "a container's state fits the 112-byte size class")
	assert.Equal(t, instanceKey{uids[0], "app", zeroStart}, (&container{podUID: uids[0], name: "app"}).key(), "an unknown start keys as before")
	assert.True(t, (&container{}).started().IsZero())
}

// TestIngestHeapPerContainer logs the live heap a stream's indexed
// containers hold, the stores they feed included (the index table, the
// node's instances, the signals' series of one pass), for
// docs/performance.md.
func TestIngestHeapPerContainer(t *testing.T) {
	const pods, runs = 1000, 5
	least := uint64(math.MaxUint64)
	for range runs {
		in, srv, raw, _ := ingestFixture(t, pods)
		var before, after goruntime.MemStats
		goruntime.GC()
		goruntime.ReadMemStats(&before)
		c := new(streamv1.Counters)
		require.NoError(t, proto.Unmarshal(raw, c))
		_, err := in.counters(c)
		require.NoError(t, err)
		c = nil // the message is dropped, as after its pass
		goruntime.GC()
		goruntime.ReadMemStats(&after)
		require.Len(t, in.table, 2*pods)
		least = min(least, after.HeapAlloc-before.HeapAlloc)
		goruntime.KeepAlive(in)
		goruntime.KeepAlive(srv)
		_ = c
	}
	t.Logf("%d containers indexed on one stream: %.0f bytes of live heap a container (the least of %d runs)", 2*pods, float64(least)/(2*pods), runs)
}
