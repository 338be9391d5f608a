package pages

import (
	"math"
	"time"

	webui "github.com/kerf-dev/kerf/web"
)

// A usage series' storage: its points packed in two rings, the minutes of
// the newest hour and the five-minute buckets before. UsageSeries
// (usageseries.go) feeds them and reads them out.

// thrBits, oomBits and their masks lay out a point. A point is packed in
// two uint32s, 8 bytes:
//   - cpu holds the mean CPU rate per pod in millicores (25 bits, to
//     33,554 cores) above the throttled share of CFS periods in percent
//     plus one (7 bits, 0: not read);
//   - mem holds the highest working set in 4 KiB pages (29 bits, to
//     2 TiB) above the OOM kills (3 bits, saturating at 7).
const (
	thrBits, oomBits = 7, 3
	thrMask, oomMask = 1<<thrBits - 1, 1<<oomBits - 1
	// noCPU and noMemory mark a slot with no reading.
	noCPU    = 1<<(32-thrBits) - 1
	noMemory = 1<<(32-oomBits) - 1
	pageSize = 4096
)

// usageSeries is one workload container's points, in two rings of
// ringSlots:
//   - fine holds the minutes of the newest hour. The slot of minute m is
//     at m % ringSlots, valid from newest-ringSlots+1 to newest.
//   - coarse holds the five-minute buckets of the five hours before. A
//     minute leaving fine is folded into its bucket (fold). Bucket q, the
//     minutes 5q to 5q+4, is at q % ringSlots, valid from the bucket of
//     the newest minute folded (foldedBucket) back ringSlots buckets.
//
// A ring of 360 minutes was 2,936 bytes, which Go allocates as 3,072.
// These are 1,076, allocated as 1,152. With its map entry and key a series
// is about 1.3 KB (TestUsageSeriesMemoryAtTheCap). The newest hour is
// what the chart's 1h window draws, minute by minute.
type usageSeries struct {
	newest       int64 // Unix minutes of the newest slot
	fine, coarse ring
	// cpuMinutes counts, per bucket, the minutes with a CPU rate folded
	// into it: its rate is their mean.
	cpuMinutes [ringSlots]uint8
	// acc are the CPU sums of the two newest minutes, whose readings may
	// still come.
	acc [2]cpuSums
}

// ring is ringSlots packed points (thrBits).
type ring struct {
	cpu, mem [ringSlots]uint32
}

// cpuSums are the CPU seconds used and the seconds run, over the pods,
// of one minute.
type cpuSums struct {
	minute         int64
	cpuSec, runSec float64
}

const emptyCPU, emptyMem = noCPU << thrBits, noMemory << oomBits

func newUsageSeries(minute int64) *usageSeries {
	s := &usageSeries{newest: minute}
	s.fine.clear()
	s.coarse.clear()
	return s
}

// clear empties every slot of r.
func (r *ring) clear() {
	for i := range r.cpu {
		r.clear1(i)
	}
}

// clear1 empties slot i of r.
func (r *ring) clear1(i int) { r.cpu[i], r.mem[i] = emptyCPU, emptyMem }

// empty reports whether slot i of r holds nothing read.
func (r *ring) empty(i int) bool { return r.cpu[i] == emptyCPU && r.mem[i] == emptyMem }

// foldedBucket is the bucket of the newest minute that has left fine.
func (s *usageSeries) foldedBucket() int64 { return (s.newest - ringSlots) / bucketMinutes }

// slot returns fine's slot of minute m, or -1 for a minute older than
// fine. It advances the rings to m (advance).
func (s *usageSeries) slot(m int64) int {
	if m <= s.newest-ringSlots {
		return -1
	}
	s.advance(m)
	return int(m % ringSlots)
}

// advance makes m the newest minute, when it is newer. The minutes
// leaving fine are folded into their buckets (cleared first when they
// start one), and fine's slots for the minutes it gains are cleared.
func (s *usageSeries) advance(m int64) {
	if m <= s.newest {
		return
	}
	old, oldBucket := s.newest, s.foldedBucket()
	s.newest = m
	newBucket := s.foldedBucket()
	for q := oldBucket + 1; q <= newBucket && q <= oldBucket+ringSlots; q++ {
		s.coarse.clear1(int(q % ringSlots))
		s.cpuMinutes[q%ringSlots] = 0
	}
	for k := old - ringSlots + 1; k <= old && k <= m-ringSlots; k++ {
		if i := int(k % ringSlots); !s.fine.empty(i) && k/bucketMinutes > newBucket-ringSlots {
			s.fold(i, k/bucketMinutes)
		}
	}
	for k := old + 1; k <= m && k <= old+ringSlots; k++ {
		s.fine.clear1(int(k % ringSlots))
	}
}

// fold adds fine's slot i to bucket q. A bucket holds the mean of its
// minutes' CPU rates, the highest of their throttled shares and working
// sets, and the sum of their OOM kills (saturating).
func (s *usageSeries) fold(i int, q int64) {
	j := int(q % ringSlots)
	cpu, mem := s.fine.cpu[i], s.fine.mem[i]
	bucketCPU := s.coarse.cpu[j]
	if milli := cpu >> thrBits; milli != noCPU {
		n := uint32(s.cpuMinutes[j])
		mean := milli
		if old := bucketCPU >> thrBits; n > 0 && old != noCPU {
			mean = (old*n + milli + (n+1)/2) / (n + 1)
		}
		s.cpuMinutes[j]++
		bucketCPU = mean<<thrBits | bucketCPU&thrMask
	}
	s.coarse.cpu[j] = bucketCPU&^thrMask | max(bucketCPU&thrMask, cpu&thrMask)
	bucketMem := s.coarse.mem[j]
	if pages := mem >> oomBits; pages != noMemory {
		bucketMem = withHighest(bucketMem, pages)
	}
	s.coarse.mem[j] = bucketMem&^oomMask | min(bucketMem&oomMask+mem&oomMask, oomMask)
}

// addCPU adds CPU used over run seconds, ending in minute m.
func (s *usageSeries) addCPU(m int64, cpuSec, runSec float64) {
	i := s.slot(m)
	if i < 0 || runSec <= 0 {
		return
	}
	a := &s.acc[m%2]
	if a.minute != m {
		if m < a.minute {
			return // older than the two minutes summed: dropped
		}
		*a = cpuSums{minute: m}
	}
	a.cpuSec += cpuSec
	a.runSec += runSec
	milli := uint32(min(max(math.Round(a.cpuSec/a.runSec*1000), 0), noCPU-1))
	s.fine.cpu[i] = milli<<thrBits | s.fine.cpu[i]&thrMask
}

func (s *usageSeries) addMemory(m int64, bytes uint64) {
	if i := s.slot(m); i >= 0 {
		pages := uint32(min((bytes+pageSize-1)/pageSize, noMemory-1))
		s.fine.mem[i] = withHighest(s.fine.mem[i], pages)
	}
}

// withHighest returns the memory word mem holding pages as its working
// set when none was read or pages is higher; its OOM kills stay.
func withHighest(mem, pages uint32) uint32 {
	if old := mem >> oomBits; old == noMemory || pages > old {
		return pages<<oomBits | mem&oomMask
	}
	return mem
}

func (s *usageSeries) setThrottled(m int64, percent int) {
	if i := s.slot(m); i >= 0 {
		v := max(s.fine.cpu[i]&thrMask, uint32(min(max(percent, 0), 100)+1))
		s.fine.cpu[i] = s.fine.cpu[i]&^thrMask | v
	}
}

func (s *usageSeries) setOOMKills(m int64, n int) {
	if i := s.slot(m); i >= 0 {
		v := max(s.fine.mem[i]&oomMask, uint32(min(max(n, 0), oomMask)))
		s.fine.mem[i] = s.fine.mem[i]&^oomMask | v
	}
}

// addOOMKill counts a kill in minute m, in its minute's slot or, once the
// minute has left fine, in its bucket. A kill older than the buckets is
// dropped.
func (s *usageSeries) addOOMKill(m int64) {
	if i := s.slot(m); i >= 0 {
		if s.fine.mem[i]&oomMask < oomMask {
			s.fine.mem[i]++
		}
		return
	}
	if q, last := m/bucketMinutes, s.foldedBucket(); q <= last && q > last-ringSlots {
		if j := int(q % ringSlots); s.coarse.mem[j]&oomMask < oomMask {
			s.coarse.mem[j]++
		}
	}
}

// points are the buckets and then the minutes with anything read, oldest
// first. A bucket's step ends where fine's minutes begin.
func (s *usageSeries) points() []webui.UsagePoint {
	var out []webui.UsagePoint
	fineFrom := s.newest - ringSlots + 1
	last := s.foldedBucket()
	for q := max(last-ringSlots+1, 0); q <= last; q++ {
		if j := int(q % ringSlots); !s.coarse.empty(j) {
			from := q * bucketMinutes
			to := min(from+bucketMinutes, fineFrom)
			out = append(out, point(from, to-from, s.coarse.cpu[j], s.coarse.mem[j]))
		}
	}
	for m := fineFrom; m <= s.newest; m++ {
		if i := int(m % ringSlots); !s.fine.empty(i) {
			out = append(out, point(m, 1, s.fine.cpu[i], s.fine.mem[i]))
		}
	}
	return out
}

// point unpacks the point of the minutes from to from+minutes.
func point(from, minutes int64, cpu, mem uint32) webui.UsagePoint {
	p := webui.UsagePoint{At: time.Unix(from*60, 0).UTC(), Step: time.Duration(minutes) * time.Minute, CPUMilli: -1, MemoryBytes: -1,
		ThrottledPercent: int(cpu&thrMask) - 1, OOMKills: int(mem & oomMask)}
	if c := cpu >> thrBits; c != noCPU {
		p.CPUMilli = int64(c)
	}
	if pages := mem >> oomBits; pages != noMemory {
		p.MemoryBytes = int64(pages) * pageSize
	}
	return p
}
