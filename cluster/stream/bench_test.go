package stream

import (
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"runtime/pprof"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	streamv1 "github.com/kerf-dev/kerf/api/stream/v1"
	"github.com/kerf-dev/kerf/cluster/signals"
)

// The leader-ingest benchmark's cluster (docs/design.md section 10):
// 3,000 agents with 50 pods of 2 containers each, 300,000 containers.
const (
	benchNodes         = 3000
	benchPodsPerNode   = 50
	benchContainersPer = 2
	benchPerNode       = benchPodsPerNode * benchContainersPer
)

// benchCluster is a leader's stream Server over every pod (benchPods: the
// ingest's own cost; the leader's CachedPods is read once per pod and
// stream, and the ingest remembers the answer), with one ingest per
// simulated agent stream after its Hello.
type benchCluster struct {
	srv     *Server
	memory  *signals.Kernel
	usage   *signals.Usage
	streams []*ingest
	// snapshot and pass are each stream's first Counters (identities and
	// absolute values) and a later one (index and increments), encoded;
	// usagePass is a later one with every container's usage too (the
	// agent's every 10th pass), its memory held still.
	snapshot, pass, usagePass [][]byte
	// now is the leader's clock: the benchmark runs passes faster than
	// the agents' 1 s, so the clock follows the passes (see ingest).
	now time.Time
}

// benchStart is the leader's clock when the streams open.
var benchStart = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)

func newBenchCluster(b *testing.B, nodes int) *benchCluster {
	b.Helper()
	pods := benchPods{}
	// TokenReviews ran when the streams opened; the ingest never calls the
	// apiserver.
	cs, err := kubernetes.NewForConfig(&rest.Config{Host: "https://127.0.0.1:1"})
	if err != nil {
		b.Fatal(err)
	}
	c := &benchCluster{memory: signals.NewKernel(signals.WithCompaction(signals.DefaultRecent)), usage: signals.NewUsage(0), now: benchStart}
	c.srv, err = New(Config{Audience: "kerf-leader", ServiceAccountNamespace: "kerf-system", ServiceAccountName: "kerf-agent",
		Clientset: cs, Pods: pods, Kernel: c.memory, Usage: c.usage, Leading: func() bool { return true }, Now: func() time.Time { return c.now },
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		b.Fatal(err)
	}
	const boot = uint64(1_234_567_890_123_456)
	for n := range nodes {
		node := fmt.Sprintf("node-%04d", n)
		snap := &streamv1.Counters{KernelNs: boot, Snapshot: true}
		pass := &streamv1.Counters{KernelNs: boot + uint64(time.Second)}
		usagePass := &streamv1.Counters{KernelNs: boot + uint64(time.Second)}
		for p := range benchPodsPerNode {
			uid := types.UID(fmt.Sprintf("6f1c2b3a-9d4e-4f5a-%04x-%012x", n, p))
			pods[uid] = &corev1.Pod{ObjectMeta: metav1.ObjectMeta{UID: uid, Namespace: "app", Name: fmt.Sprintf("web-%d-%d", n, p)},
				Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "app"}, {Name: "sidecar"}}}}
			for k := range benchContainersPer {
				i := uint32(p*benchContainersPer + k)
				snap.Containers = append(snap.Containers, &streamv1.ContainerCounters{
					Index: i, PodUid: string(uid), Container: []string{"app", "sidecar"}[k],
					StartedAtUnixNs: 1_790_000_000_000_000_000 + int64(i)*1_000_000_007,
					KernelNsDelta:   uint64(i) * 2_900,
					Periods:         864_000 + uint64(i)*17, Throttled: 12_000 + uint64(i), ThrottledNs: 93_000_000_000 + uint64(i)*1_000_003,
					Usage: &streamv1.ContainerUsage{CpuNs: 7_200_000_000_000 + uint64(i)*1_000_000_007,
						WorkingSetDelta: 200<<20 + int64(i)<<20, PeakDelta: 300<<20 + int64(i)<<20},
				})
				cc := &streamv1.ContainerCounters{Index: i, KernelNsDelta: uint64(i) * 2_900, Periods: 10}
				if i%10 == 0 {
					cc.Throttled, cc.ThrottledNs = 2, 7_500_000
				}
				pass.Containers = append(pass.Containers, cc)
				// Between 0.1 and 10 s of CPU in 10 s.
				uc := &streamv1.ContainerCounters{Index: i, KernelNsDelta: uint64(i) * 2_900, Periods: 10, Throttled: cc.Throttled, ThrottledNs: cc.ThrottledNs,
					Usage: &streamv1.ContainerUsage{CpuNs: 100_000_000 + uint64(i)*99_000_000}}
				usagePass.Containers = append(usagePass.Containers, uc)
			}
		}
		c.snapshot = append(c.snapshot, marshal(b, snap))
		c.pass = append(c.pass, marshal(b, pass))
		c.usagePass = append(c.usagePass, marshal(b, usagePass))
		c.streams = append(c.streams, newIngest(c.srv, node, &streamv1.Hello{NodeName: node, KernelNs: boot, StartedAtUnixNs: 1}))
	}
	return c
}

func marshal(b *testing.B, c *streamv1.Counters) []byte {
	b.Helper()
	out, err := proto.Marshal(&streamv1.AgentMessage{Body: &streamv1.AgentMessage_Counters{Counters: c}})
	if err != nil {
		b.Fatal(err)
	}
	return out
}

// ingest decodes one encoded AgentMessage of a stream and ingests it, as
// Connect does after the stream's authentication. Passes are a second
// apart with up to 1 ms of jitter, as an agent's ticker and reads have,
// so that the leader's time encoding pays for it; the leader's clock reads
// the pass's time plus 2 ms of transit when it arrives.
func (c *benchCluster) ingest(b *testing.B, stream int, msg []byte, pass int) {
	var m streamv1.AgentMessage
	if err := proto.Unmarshal(msg, &m); err != nil {
		b.Fatal(err)
	}
	counters := m.GetCounters()
	offset := time.Duration(pass)*time.Second + time.Duration(pass*7919%1000)*time.Microsecond
	counters.KernelNs += uint64(offset)
	c.now = benchStart.Add(offset + 2*time.Millisecond)
	if _, err := c.streams[stream].counters(counters); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkIngest300kContainers measures the leader's ingest on one core
// (GOMAXPROCS=1): decoding each agent's pass of 100 changed containers and
// ingesting it (index table, pod-on-node check, signals.Kernel with
// compaction, signals.Usage), round robin over 3,000 streams after their
// snapshots, every 10th pass of a stream with usage. It reports samples/s,
// and the encoded bytes per sample of a pass (wire-B/sample: the index, the
// time offset and the increases of one container; usage-wire-B/sample with
// its usage too, memory held still).
func BenchmarkIngest300kContainers(b *testing.B) {
	c := newBenchCluster(b, benchNodes)
	for s := range c.streams {
		c.ingest(b, s, c.snapshot[s], 0)
	}
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		s, p := i%benchNodes, 1+i/benchNodes
		msg := c.pass[s]
		if p%10 == 0 {
			msg = c.usagePass[s]
		}
		c.ingest(b, s, msg, p)
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)*benchPerNode/b.Elapsed().Seconds(), "samples/s")
	b.ReportMetric(float64(len(c.pass[0]))/benchPerNode, "wire-B/sample")
	b.ReportMetric(float64(len(c.usagePass[0]))/benchPerNode, "usage-wire-B/sample")
	b.ReportMetric(float64(len(c.snapshot[0]))/benchPerNode, "snapshot-B/sample")
}

// heapProfile names a file for BenchmarkIngestMemoryPerContainer's heap
// profile, written while the leader's state is still live (-memprofile
// writes at exit, when it is gone): go tool pprof -sample_index=inuse_space.
var heapProfile = flag.String("ingest.heapprofile", "", "write the leader's live heap profile after the memory benchmark's passes to this file")

// BenchmarkIngestMemoryPerContainer measures the leader's memory per
// tracked container: the heap in use after a GC, less before, over
// 300,000 containers once their streams have sent a snapshot and 45 passes
// one second apart of every container changed (the worst case: the
// signals.Kernel then holds its full recent span of 30 s), stream tables and
// signals.Kernel together.
func BenchmarkIngestMemoryPerContainer(b *testing.B) {
	const passes = 45
	for range b.N {
		b.StopTimer()
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		c := newBenchCluster(b, benchNodes)
		// The fixture's pod cache and encoded messages are not the
		// leader's per-container cost; measure from here.
		runtime.GC()
		runtime.ReadMemStats(&before)
		b.StartTimer()
		for s := range c.streams {
			c.ingest(b, s, c.snapshot[s], 0)
		}
		for p := 1; p <= passes; p++ {
			for s := range c.streams {
				msg := c.pass[s]
				if p%10 == 0 {
					msg = c.usagePass[s]
				}
				c.ingest(b, s, msg, p)
			}
		}
		b.StopTimer()
		runtime.GC()
		runtime.ReadMemStats(&after)
		if *heapProfile != "" {
			writeHeapProfile(b, *heapProfile)
		}
		_, instances, samples := c.memory.Len()
		_, readings := c.usage.Len()
		b.ReportMetric(float64(int64(after.HeapInuse)-int64(before.HeapInuse))/float64(benchNodes*benchPerNode), "B/container")
		b.ReportMetric(float64(samples)/float64(instances), "samples/container")
		b.ReportMetric(float64(readings)/float64(instances), "usage-readings/container")
		runtime.KeepAlive(c)
	}
}

func writeHeapProfile(b *testing.B, path string) {
	b.Helper()
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		b.Fatalf("write heap profile %s: %v", path, err)
	}
}

// benchPods are the benchmark cluster's pods by UID: 150,000 pods would
// take the apiserver minutes to create.
type benchPods map[types.UID]*corev1.Pod

// PodByUID implements Pods.
func (p benchPods) PodByUID(uid types.UID) (*corev1.Pod, bool) {
	pod, ok := p[uid]
	return pod, ok
}
