package stream

import (
	streamv1 "github.com/kerf-dev/kerf/api/stream/v1"
	"github.com/kerf-dev/kerf/node/report"
)

// maxCountersPerMessage bounds the containers of one Counters message, so a
// snapshot stays well under the leader's message size limit
// (streamv1.MaxMessageBytes): a container costs at most a few hundred
// bytes.
const maxCountersPerMessage = 500

// index is one stream's container index (the protocol's rules, see
// streamv1.Counters): every container sent on the stream has an index and
// what was last sent for it, against which its next sample is encoded.
type index struct {
	byKey map[report.ContainerKey]*indexed
	next  uint32
}

// indexed is a container's index on a stream and what was last sent for
// it: its counters, the usage of the last sample that carried one (the
// base of the next usage's deltas; zero before the first), and the OOM
// kill count sent (oomSent once the stream carried oom_kills_read).
type indexed struct {
	idx     uint32
	last    report.Sample
	usage   report.Usage
	ns      uint64
	oom     uint64
	oomSent bool
}

// reset forgets every container, as a snapshot does.
func (x *index) reset() {
	x.byKey, x.next = map[report.ContainerKey]*indexed{}, 0
}

// forget drops container k, returning its index and whether it had one.
func (x *index) forget(k report.ContainerKey) (uint32, bool) {
	e, ok := x.byKey[k]
	if !ok {
		return 0, false
	}
	delete(x.byKey, k)
	return e.idx, true
}

// encode encodes samples as one Counters message, with the indexes of the
// containers gone: a container new on the stream, or whose counters went
// back (a restart), gets a new index with its identity and absolute
// values; the others get their index and increments. A sample with usage
// carries it relative to the index's previous usage. The kernel's OOM
// kill count goes as its value with oom_kills_read on the index's first
// sample that has it, then as its increments (nothing while it holds
// still). Kernel times are clk's, relative to the message's earliest.
func (x *index) encode(clk kernelClock, samples []report.Sample, gone []uint32, snapshot bool) *streamv1.Counters {
	msg := &streamv1.Counters{Gone: gone, Snapshot: snapshot}
	if len(samples) == 0 {
		return msg
	}
	nss := make([]uint64, len(samples))
	base := uint64(0)
	for i, smp := range samples {
		ns := clk.ns(smp.At)
		if e, ok := x.byKey[smp.Key]; ok && ns < e.ns {
			ns = e.ns // the leader refuses time going back on one index
		}
		nss[i] = ns
		if i == 0 || ns < base {
			base = ns
		}
	}
	msg.KernelNs = base
	msg.Containers = make([]*streamv1.ContainerCounters, 0, len(samples))
	for i, smp := range samples {
		cc := &streamv1.ContainerCounters{KernelNsDelta: nss[i] - base}
		e, ok := x.byKey[smp.Key]
		restarted := ok && (smp.Periods < e.last.Periods || smp.Throttled < e.last.Throttled || smp.ThrottledTime < e.last.ThrottledTime ||
			smp.HasUsage && smp.Usage.CPU < e.usage.CPU || smp.HasOOMKills && e.oomSent && smp.OOMKills < e.oom)
		if restarted {
			msg.Gone = append(msg.Gone, e.idx)
		}
		if !ok || restarted {
			e = &indexed{idx: x.next}
			x.next++
			x.byKey[smp.Key] = e
			cc.Index, cc.PodUid, cc.Container = e.idx, smp.Key.PodUID, smp.Key.Name
			cc.Periods, cc.Throttled, cc.ThrottledNs = smp.Periods, smp.Throttled, uint64(max(smp.ThrottledTime, 0))
		} else {
			cc.Index = e.idx
			cc.Periods = smp.Periods - e.last.Periods
			cc.Throttled = smp.Throttled - e.last.Throttled
			cc.ThrottledNs = uint64(smp.ThrottledTime - e.last.ThrottledTime)
		}
		if smp.HasUsage {
			cc.Usage = &streamv1.ContainerUsage{
				CpuNs:           uint64(max(smp.Usage.CPU, 0) - max(e.usage.CPU, 0)),
				WorkingSetDelta: int64(smp.Usage.WorkingSet - e.usage.WorkingSet),
				PeakDelta:       int64(smp.Usage.Peak - e.usage.Peak),
			}
			e.usage = smp.Usage
		}
		if smp.HasOOMKills {
			if e.oomSent {
				cc.OomKills = smp.OOMKills - e.oom
			} else {
				cc.OomKills, cc.OomKillsRead, e.oomSent = smp.OOMKills, true, true
			}
			e.oom = smp.OOMKills
		}
		e.last, e.ns = smp, nss[i]
		msg.Containers = append(msg.Containers, cc)
	}
	return msg
}
