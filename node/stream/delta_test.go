package stream

import (
	"fmt"
	"testing"
	"time"

	streamv1 "github.com/kerf-dev/kerf/api/stream/v1"
	"github.com/kerf-dev/kerf/node/report"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
)

func TestIndexSendsIncrementsAndANewIndexOnARestart(t *testing.T) {
	clk, err := newKernelClock()
	require.NoError(t, err)
	key := report.ContainerKey{PodUID: "uid", Name: "app"}
	at := time.Now()
	var x index
	x.reset()

	msg := x.encode(clk, []report.Sample{{Key: key, At: at, Periods: 100, Throttled: 10, ThrottledTime: time.Second}}, nil, true)
	assert.True(t, msg.GetSnapshot())
	require.Len(t, msg.GetContainers(), 1)
	first := msg.GetContainers()[0]
	assert.Equal(t, []any{uint32(0), "uid", "app", uint64(100), uint64(10), uint64(time.Second)},
		[]any{first.GetIndex(), first.GetPodUid(), first.GetContainer(), first.GetPeriods(), first.GetThrottled(), first.GetThrottledNs()},
		"a container new on the stream: its identity and absolute values")
	assert.Equal(t, clk.ns(at), msg.GetKernelNs())

	msg = x.encode(clk, []report.Sample{{Key: key, At: at.Add(time.Second), Periods: 150, Throttled: 12, ThrottledTime: 2 * time.Second}}, nil, false)
	next := msg.GetContainers()[0]
	assert.Equal(t, []any{uint32(0), "", uint64(50), uint64(2), uint64(time.Second)},
		[]any{next.GetIndex(), next.GetPodUid(), next.GetPeriods(), next.GetThrottled(), next.GetThrottledNs()},
		"a known container: its index and increments")

	msg = x.encode(clk, []report.Sample{{Key: key, At: at, Periods: 5, Throttled: 1}}, nil, false)
	assert.Equal(t, []uint32{0}, msg.GetGone(), "counters going back: the old index is gone")
	restarted := msg.GetContainers()[0]
	assert.Equal(t, []any{uint32(1), "uid", uint64(5)}, []any{restarted.GetIndex(), restarted.GetPodUid(), restarted.GetPeriods()})
	assert.Equal(t, clk.ns(at.Add(time.Second)), msg.GetKernelNs(), "time never goes back on one container")

	idx, ok := x.forget(key)
	assert.True(t, ok)
	assert.Equal(t, uint32(1), idx)
	_, ok = x.forget(key)
	assert.False(t, ok)
}

// decoded is a container's values as a leader rebuilds them from the
// stream: the sum of the deltas on its index.
type decoded struct {
	periods, cpuNs, workingSet, peak uint64
}

// decode applies msg to table as the leader's ingest does.
func decode(t *testing.T, table map[uint32]*decoded, msg *streamv1.Counters) {
	t.Helper()
	for _, idx := range msg.GetGone() {
		delete(table, idx)
	}
	for _, cc := range msg.GetContainers() {
		d := table[cc.GetIndex()]
		if cc.GetPodUid() != "" {
			d = &decoded{}
			table[cc.GetIndex()] = d
		}
		require.NotNil(t, d, "index %d has no identity", cc.GetIndex())
		d.periods += cc.GetPeriods()
		if u := cc.GetUsage(); u != nil {
			d.cpuNs += u.GetCpuNs()
			d.workingSet += uint64(u.GetWorkingSetDelta())
			d.peak += uint64(u.GetPeakDelta())
		}
	}
}

func TestIndexRoundTripsUsage(t *testing.T) {
	clk, err := newKernelClock()
	require.NoError(t, err)
	key := report.ContainerKey{PodUID: "uid", Name: "app"}
	at := time.Now()
	var x index
	x.reset()
	table := map[uint32]*decoded{}
	send := func(s report.Sample, snapshot bool) *streamv1.ContainerCounters {
		t.Helper()
		msg := x.encode(clk, []report.Sample{s}, nil, snapshot)
		decode(t, table, msg)
		return msg.GetContainers()[0]
	}
	usage := func(cpu time.Duration, ws, peak uint64) report.Usage {
		return report.Usage{CPU: cpu, WorkingSet: ws, Peak: peak}
	}

	// A first sample without usage: none on the wire.
	cc := send(report.Sample{Key: key, At: at, Periods: 10}, true)
	assert.Nil(t, cc.GetUsage())
	// The first usage on the index: absolute.
	cc = send(report.Sample{Key: key, At: at.Add(time.Second), Periods: 20, HasUsage: true, Usage: usage(3*time.Second, 100<<20, 300<<20)}, false)
	assert.Equal(t, []any{uint64(3 * time.Second), int64(100 << 20), int64(300 << 20)},
		[]any{cc.GetUsage().GetCpuNs(), cc.GetUsage().GetWorkingSetDelta(), cc.GetUsage().GetPeakDelta()})
	// Samples between usage readings carry none; the next usage is relative
	// to the previous usage, whichever way memory went.
	send(report.Sample{Key: key, At: at.Add(2 * time.Second), Periods: 30}, false)
	cc = send(report.Sample{Key: key, At: at.Add(11 * time.Second), Periods: 40, HasUsage: true, Usage: usage(4*time.Second, 60<<20, 120<<20)}, false)
	assert.Equal(t, []any{uint64(time.Second), int64(-40 << 20), int64(-180 << 20)},
		[]any{cc.GetUsage().GetCpuNs(), cc.GetUsage().GetWorkingSetDelta(), cc.GetUsage().GetPeakDelta()})
	assert.Equal(t, decoded{periods: 40, cpuNs: uint64(4 * time.Second), workingSet: 60 << 20, peak: 120 << 20}, *table[0])
	// Memory that held still costs only the CPU increment.
	cc = send(report.Sample{Key: key, At: at.Add(21 * time.Second), Periods: 50, HasUsage: true, Usage: usage(4500*time.Millisecond, 60<<20, 120<<20)}, false)
	assert.Zero(t, cc.GetUsage().GetWorkingSetDelta())
	assert.Zero(t, cc.GetUsage().GetPeakDelta())

	// CPU time going back is a restarted container: a new index, absolute.
	cc = send(report.Sample{Key: key, At: at.Add(31 * time.Second), Periods: 60, HasUsage: true, Usage: usage(time.Second, 5<<20, 6<<20)}, false)
	assert.Equal(t, uint32(1), cc.GetIndex())
	assert.Equal(t, "uid", cc.GetPodUid())
	assert.NotContains(t, table, uint32(0))
	assert.Equal(t, decoded{periods: 60, cpuNs: uint64(time.Second), workingSet: 5 << 20, peak: 6 << 20}, *table[1])

	// A snapshot starts every index afresh: usage absolute again.
	x.reset()
	clear(table)
	send(report.Sample{Key: key, At: at.Add(41 * time.Second), Periods: 70, HasUsage: true, Usage: usage(2*time.Second, 7<<20, 8<<20)}, true)
	assert.Equal(t, decoded{periods: 70, cpuNs: uint64(2 * time.Second), workingSet: 7 << 20, peak: 8 << 20}, *table[0])
}

// TestWireBytesPerSample measures the encoded Counters message of a
// 330-container node's passes per container sample, as the agent sends
// them: every container's counters moved (10 periods of a 100 ms quota
// in 1 s), samples read 3 µs apart, and on a usage pass (every usage
// interval) each one's usage with up to 10 s of CPU time. A sample whose
// memory held still stays within 32 bytes; one whose working set and peak
// moved by some MiB costs a few more.
func TestWireBytesPerSample(t *testing.T) {
	const n = 330
	clk, err := newKernelClock()
	require.NoError(t, err)
	at := time.Now()
	var x index
	x.reset()
	pass := func(k int, usage bool, memory func(i int) (ws, peak uint64)) float64 {
		samples := make([]report.Sample, n)
		for i := range samples {
			s := report.Sample{Key: report.ContainerKey{PodUID: fmt.Sprintf("6f1c2b3a-9d4e-4f5a-8b7c-%012x", i/3), Name: fmt.Sprintf("c%d", i%3)},
				At: at.Add(time.Duration(k)*time.Second + time.Duration(i)*3*time.Microsecond), Periods: uint64(864_000 + 10*k)}
			if usage {
				ws, peak := memory(i)
				// Between 0.1 and 10 s of CPU per 10 s, growing with i.
				s.HasUsage, s.Usage = true, report.Usage{CPU: time.Duration(k) * (100*time.Millisecond + time.Duration(i)*30*time.Millisecond), WorkingSet: ws, Peak: peak}
			}
			samples[i] = s
		}
		msg := x.encode(clk, samples, nil, k == 0)
		return float64(proto.Size(&streamv1.AgentMessage{Body: &streamv1.AgentMessage_Counters{Counters: msg}})) / n
	}
	still := func(i int) (uint64, uint64) { return 200<<20 + uint64(i)<<20, 300<<20 + uint64(i)<<20 }
	snapshot := pass(0, true, still)
	counters := pass(1, false, nil)
	usage := pass(10, true, still)
	moved := pass(20, true, func(i int) (uint64, uint64) {
		ws, peak := still(i)
		return ws - 3<<20, peak + 5<<20
	})
	t.Logf("wire bytes per container sample: snapshot %.1f, counters pass %.1f, usage pass (memory still) %.1f, usage pass (working set -3 MiB, peak +5 MiB) %.1f",
		snapshot, counters, usage, moved)
	assert.LessOrEqual(t, counters, 32.0)
	assert.LessOrEqual(t, usage, 32.0, "a usage pass of containers whose memory held still")
	assert.LessOrEqual(t, moved, 32.0, "a usage pass of containers whose memory moved by some MiB")
}
