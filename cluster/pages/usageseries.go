package pages

import (
	"context"
	"log/slog"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/cluster/forward"
	"github.com/kerf-dev/kerf/cluster/signals"
	"github.com/kerf-dev/kerf/cluster/workload"
	webui "github.com/kerf-dev/kerf/web"
)

// UsageSeriesConfig bounds the usage series the workload pages chart
// (docs/web.md).
type UsageSeriesConfig struct {
	// Period is how often the series read signals.Usage; zero means
	// DefaultUsageSeriesPeriod. It must stay within the store's span
	// (signals.UsageSamples readings) for no reading to be missed.
	Period time.Duration
	// MaxSeries bounds the workload containers with a series; zero means
	// DefaultUsageSeriesMax. Beyond it new ones get none (a warning says
	// so).
	MaxSeries int
}

// Bounds of the usage series.
const (
	// DefaultUsageSeriesPeriod reads the agents' readings (every 10 s by
	// default) well within the store's four.
	DefaultUsageSeriesPeriod = 20 * time.Second
	// DefaultUsageSeriesMax bounds the series to about 7 MB of the
	// leader's heap: 5,000 of about 1.3 KB each (usageSeries).
	DefaultUsageSeriesMax = 5000
	// UsageSeriesStep is the span of one point of the newest hour.
	UsageSeriesStep = time.Minute
	// UsageSeriesBucket is the span of one point older than that: five
	// minutes.
	UsageSeriesBucket = 5 * time.Minute
	// UsageSeriesSpan is how far back a series goes: 6 h.
	UsageSeriesSpan = 6 * time.Hour
)

// The rings of a series: minutes for the newest hour, five-minute buckets
// for the five hours before it.
const (
	ringSlots     = 60
	bucketMinutes = int64(UsageSeriesBucket / time.Minute)
	spanMinutes   = int64(UsageSeriesSpan / time.Minute)
)

// seriesKey names a workload container.
type seriesKey struct {
	namespace string
	kind      v1alpha1.WorkloadKind
	name      string
	container string
}

// workload is the key of k's workload: k without its container.
func (k seriesKey) workload() seriesKey {
	k.container = ""
	return k
}

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
		if old := bucketMem >> oomBits; old == noMemory || pages > old {
			bucketMem = pages<<oomBits | bucketMem&oomMask
		}
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
		if old := s.fine.mem[i] >> oomBits; old == noMemory || pages > old {
			s.fine.mem[i] = pages<<oomBits | s.fine.mem[i]&oomMask
		}
	}
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

// seriesInstance is what the series remember of one running container:
// the reading they read up to and its CPU counter.
type seriesInstance struct {
	cursor    time.Time
	cpu       time.Duration
	statusOOM time.Time
	seen      uint64
}

// oomKilledReason is the reason the kubelet gives a container's
// termination by the OOM killer.
const oomKilledReason = "OOMKilled"

type instanceRef struct {
	pod       types.UID
	container string
}

// UsageSeries keeps, for the workload pages, a downsampled usage series of
// every container of the workloads that have a RightsizingRecommendation.
//
// A series has 1-minute points over the newest hour and 5-minute points
// over the five hours before it: the mean CPU rate per pod, the highest
// working set, the throttled share of CFS periods and the OOM kills.
// They are fed from signals.Usage and signals.Kernel, the agents'
// readings, which those stores keep only briefly. At most MaxSeries
// containers have one.
//
// It is a manager Runnable only the elected leader runs, since only it
// receives the agents' readings. It is safe for concurrent use.
type UsageSeries struct {
	client client.Reader
	usage  *signals.Usage
	kernel *signals.Kernel
	now    func() time.Time
	log    *slog.Logger
	period time.Duration
	max    int

	mu     sync.Mutex
	series map[seriesKey]*usageSeries
	// perWorkload counts the series of each workload (by its key with
	// no container): with the table full, a workload with none is not
	// read, as none could be made for it.
	perWorkload map[seriesKey]int
	instances   map[instanceRef]*seriesInstance
	tick        uint64
	full        bool
	// scratch is the room a pass reads each workload and its pods into.
	scratch workload.Scratch

	// Recommendations, when set, gives a pass the recommendations. The
	// leader's, cachedRecommendations, gives the informer's own objects,
	// not a list copying every one's struct each pass (docs/leader.md,
	// "Memory: how tight a limit costs what"). Set it before Start.
	Recommendations forward.Recommendations
}

// NewUsageSeries returns empty series fed from sig, reading the
// recommendations, workloads and pods through c. The leader passes its
// cache's client marked workload.Indexed, so each workload's pods are
// read through the controller index. A store sig lacks, as in a test's
// Stores with a Kernel only, is not read.
func NewUsageSeries(c client.Reader, sig *signals.Stores, cfg UsageSeriesConfig, now func() time.Time, log *slog.Logger) *UsageSeries {
	if cfg.Period <= 0 {
		cfg.Period = DefaultUsageSeriesPeriod
	}
	if cfg.MaxSeries <= 0 {
		cfg.MaxSeries = DefaultUsageSeriesMax
	}
	if now == nil {
		now = time.Now
	}
	return &UsageSeries{client: c, usage: sig.Usage, kernel: sig.Kernel, now: now, log: log.With("component", "usageSeries"),
		period: cfg.Period, max: cfg.MaxSeries, series: map[seriesKey]*usageSeries{}, perWorkload: map[seriesKey]int{}, instances: map[instanceRef]*seriesInstance{}}
}

// NeedLeaderElection says only the elected leader feeds the series.
func (u *UsageSeries) NeedLeaderElection() bool { return true }

// Start feeds the series every period until ctx is done.
func (u *UsageSeries) Start(ctx context.Context) error {
	t := time.NewTicker(u.period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			if err := u.Pass(ctx); err != nil {
				u.log.Warn("usage series not fed", "err", err)
			}
		}
	}
}

// Pass reads the new readings of the running pods of every recommended
// workload into the series. It forgets the series of workloads no
// recommendation targets any more, and those with no point left.
func (u *UsageSeries) Pass(ctx context.Context) error {
	now := u.now()
	rsrs, err := u.recommendationsNow(ctx)
	if err != nil {
		return err
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	u.tick++
	wanted := map[seriesKey]bool{} // workloads, container empty
	full := false
	for _, rsr := range rsrs {
		wk := seriesKey{namespace: rsr.Namespace, kind: rsr.Spec.TargetRef.Kind, name: rsr.Spec.TargetRef.Name}
		if wanted[wk] {
			continue
		}
		wanted[wk] = true
		if len(u.series) >= u.max && u.perWorkload[wk] == 0 {
			// No room for its series: its pods are not read. Reading
			// them was most of a pass's reads and of the leader's
			// allocations (docs/performance.md, "The eighth round").
			full = true
			continue
		}
		w, err := workload.GetWith(ctx, u.client, rsr.Namespace, rsr.Spec.TargetRef, &u.scratch)
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			u.log.Debug("workload of a recommendation not read", "namespace", rsr.Namespace, "name", rsr.Name, "err", err)
			continue
		}
		pods, err := workload.PodsWith(ctx, u.client, w, &u.scratch)
		if err != nil {
			return err
		}
		pods = slices.DeleteFunc(pods, func(p corev1.Pod) bool { return p.Status.Phase != corev1.PodRunning })
		if !u.feed(wk, pods, now) {
			full = true
		}
	}
	if full && !u.full {
		u.log.Warn("usage series hold their maximum of containers; new ones are not charted", "maxSeries", u.max)
	}
	u.full = full
	oldest := now.Unix()/60 - spanMinutes
	for k, s := range u.series {
		if wk := k.workload(); !wanted[wk] || s.newest <= oldest {
			delete(u.series, k)
			if u.perWorkload[wk]--; u.perWorkload[wk] <= 0 {
				delete(u.perWorkload, wk)
			}
		}
	}
	for k, in := range u.instances {
		if in.seen != u.tick {
			delete(u.instances, k)
		}
	}
	return nil
}

// recommendationsNow returns the recommendations, only to be read: from
// u.Recommendations where set, else a list's (items sharing the cache's
// objects).
func (u *UsageSeries) recommendationsNow(ctx context.Context) ([]*v1alpha1.RightsizingRecommendation, error) {
	if u.Recommendations != nil {
		return u.Recommendations(ctx)
	}
	return forward.ListRecommendations(ctx, u.client)
}

// feed reads one workload's pods into its containers' series; false when a
// series was not made for want of room. u.mu is held.
func (u *UsageSeries) feed(wk seriesKey, pods []corev1.Pod, now time.Time) bool {
	room := true
	minute := now.Unix() / 60
	kills := map[string][3]int{} // per container, the kills of the three newest minutes
	var live []*corev1.Pod
	names := map[string]bool{}
	for i := range pods {
		pod := &pods[i]
		live = append(live, pod)
		for _, c := range pod.Spec.Containers {
			k := wk
			k.container = c.Name
			s := u.series[k]
			if s == nil {
				if len(u.series) >= u.max {
					room = false
					continue
				}
				s = newUsageSeries(minute)
				u.series[k] = s
				u.perWorkload[wk]++
			}
			names[c.Name] = true
			u.ingest(s, pod, c.Name, now, kills)
		}
	}
	for name, n := range kills {
		k := wk
		k.container = name
		if s := u.series[k]; s != nil {
			for i, c := range n {
				if c > 0 {
					s.setOOMKills(minute-2+int64(i), c)
				}
			}
		}
	}
	if len(names) > 0 && len(live) > 0 && u.kernel != nil {
		u.throttling(wk, live, names, now)
	}
	return room
}

// ingest feeds one container's new readings and OOM kills; u.mu is held.
func (u *UsageSeries) ingest(s *usageSeries, pod *corev1.Pod, container string, now time.Time, kills map[string][3]int) {
	ref := instanceRef{pod.UID, container}
	in := u.instances[ref]
	if in == nil {
		in = &seriesInstance{}
		u.instances[ref] = in
	}
	in.seen = u.tick
	if u.usage == nil {
		return
	}
	for _, r := range u.usage.Since(pod.UID, container, in.cursor, nil) {
		m := r.At.Unix() / 60
		if !in.cursor.IsZero() && r.CPU >= in.cpu && r.At.After(in.cursor) {
			s.addCPU(m, (r.CPU - in.cpu).Seconds(), r.At.Sub(in.cursor).Seconds())
		}
		s.addMemory(m, r.WorkingSet)
		in.cursor, in.cpu = r.At, r.CPU
	}
	// The kernel's kills per minute, re-read for the three newest minutes
	// (a kill may arrive late); set, not added, so a re-read counts once.
	minute := now.Unix() / 60
	n := kills[container]
	reported := false
	for i := range 3 {
		if u.kernel == nil {
			break
		}
		from := time.Unix((minute-2+int64(i))*60, 0)
		c, ok := u.kernel.OOMKills(pod.UID, container, from.Add(-time.Nanosecond), from.Add(time.Minute-time.Nanosecond))
		n[i] += c
		reported = reported || ok
	}
	kills[container] = n
	// Without the agents' kills, the kubelet's: the container's last
	// termination, OOMKilled.
	if reported {
		return
	}
	for _, cs := range pod.Status.ContainerStatuses {
		if t := cs.LastTerminationState.Terminated; cs.Name == container && t != nil && t.Reason == oomKilledReason && t.FinishedAt.After(in.statusOOM) {
			if !in.statusOOM.IsZero() || now.Sub(t.FinishedAt.Time) < UsageSeriesSpan {
				s.addOOMKill(t.FinishedAt.Unix() / 60)
			}
			in.statusOOM = t.FinishedAt.Time
		}
	}
}

// throttling sets the throttled share of the current minute so far, from
// the kernel store's CFS counters; u.mu is held.
func (u *UsageSeries) throttling(wk seriesKey, pods []*corev1.Pod, names map[string]bool, now time.Time) {
	start := now.Truncate(time.Minute)
	if now.Sub(start) < 5*time.Second {
		return // too little of the minute to say
	}
	list := make([]string, 0, len(names))
	for n := range names {
		list = append(list, n)
	}
	wins, err := u.kernel.ThrottleWindows(pods, list, start, now)
	if err != nil {
		return
	}
	for name, w := range wins {
		k := wk
		k.container = name
		if s := u.series[k]; s != nil && w.Periods > 0 {
			s.setThrottled(start.Unix()/60, int(math.Round(w.Throttled/w.Periods*100)))
		}
	}
}

// Usage returns the series of a workload's containers, by container name,
// each oldest point first.
func (u *UsageSeries) Usage(namespace string, kind v1alpha1.WorkloadKind, name string) []webui.ContainerUsage {
	u.mu.Lock()
	defer u.mu.Unlock()
	var out []webui.ContainerUsage
	for k, s := range u.series {
		if k.namespace == namespace && k.kind == kind && k.name == name {
			if pts := s.points(); len(pts) > 0 {
				out = append(out, webui.ContainerUsage{Container: k.container, Step: UsageSeriesStep, Points: pts})
			}
		}
	}
	slices.SortFunc(out, func(a, b webui.ContainerUsage) int { return strings.Compare(a.Container, b.Container) })
	return out
}

// Len returns the series held.
func (u *UsageSeries) Len() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return len(u.series)
}

// Reader returns what the series read the recommendations, workloads and
// pods through.
func (u *UsageSeries) Reader() client.Reader { return u.client }

// Reads reports whether the last pass read the pod's container: the pod
// was running, and its workload is recommended and has room for a series.
func (u *UsageSeries) Reads(pod types.UID, container string) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.instances[instanceRef{pod, container}] != nil
}
