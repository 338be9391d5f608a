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
