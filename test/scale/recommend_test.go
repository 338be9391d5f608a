package scale

// The recommender at fleet scale (issue 34): every workload's policy turns
// spec.recommend on, the simulated agents' usage feeds it, and the harness
// measures the leader while the recommender's first recommendations (the
// wave) are written and applied, with the OOM probes' rollbacks during it.
//
// A benchmark of its own, not a switch in BenchmarkLeaderAtScale: its wave
// is the recommender's, not the harness's, it has no in-place workload
// and no connect storm, and a switch would fork that function's every
// phase.

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/node/oom"
)

// Goals of issue 34 at 25,000 workloads with the recommender on; the
// benchmark reports against them and asserts neither.
const (
	goalRSSMiB        = 460
	goalRollbackP99Ms = 250
)

// passSteps are kerf_recommender_pass_seconds's steps, in pass order
// (cluster/recommender, pass).
var passSteps = []string{"policies", "feed", "throttling", "prune", "recommend", "checkpoint", "total"}

// recommendedWatch notes when each recommendation the recommender wrote
// (label kerf.dev/recommended-by: kerf) was first seen, by workload.
type recommendedWatch struct {
	mu    sync.Mutex
	first map[string]time.Time
}

func (w *recommendedWatch) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.first)
}

// earliest is when the first of them was seen, zero before any.
func (w *recommendedWatch) earliest() time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	var at time.Time
	for _, t := range w.first {
		if at.IsZero() || t.Before(at) {
			at = t
		}
	}
	return at
}

// latest is when the last of them was seen, zero before any.
func (w *recommendedWatch) latest() time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	var at time.Time
	for _, t := range w.first {
		if t.After(at) {
			at = t
		}
	}
	return at
}

// watchRecommended runs a recommendedWatch until ctx is done, starting
// again from the last resource version when a watch ends. Its map holds
// at most one entry per workload.
func watchRecommended(ctx context.Context, tb testing.TB, c client.WithWatch) *recommendedWatch {
	w := &recommendedWatch{first: map[string]time.Time{}}
	mine := client.MatchingLabels{v1alpha1.RecommendedByLabel: v1alpha1.RecommendedByKerf}
	var list v1alpha1.RightsizingRecommendationList
	require.NoError(tb, c.List(ctx, &list, mine, client.Limit(1)))
	rv := list.ResourceVersion
	go func() {
		for ctx.Err() == nil {
			opts := &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: true}}
			mine.ApplyToList(opts)
			wi, err := c.Watch(ctx, &v1alpha1.RightsizingRecommendationList{}, opts)
			if err != nil {
				time.Sleep(100 * time.Millisecond)
				continue
			}
			for ev := range wi.ResultChan() {
				now := time.Now()
				r, ok := ev.Object.(*v1alpha1.RightsizingRecommendation)
				if !ok {
					continue
				}
				rv = r.ResourceVersion
				if ev.Type != watch.Added && ev.Type != watch.Modified {
					continue
				}
				key := r.Namespace + "/" + r.Name
				w.mu.Lock()
				if _, seen := w.first[key]; !seen {
					w.first[key] = now
				}
				w.mu.Unlock()
			}
			wi.Stop()
		}
	}()
	return w
}

// recommenderWrite is one kind of write the recommender makes, as the
// apiserver counts it (apiserver_request_total of any of verbs).
type recommenderWrite struct {
	name     string
	resource string
	verbs    []string
}

// recommenderWrites are the recommender's writes: its recommendations'
// creates and patches (the status is the reconciler's) and its
// checkpoints'. Nothing else writes these during the wave: the harness
// created its probes' recommendations before it.
var recommenderWrites = []recommenderWrite{
	{"create recommendation", "rightsizingrecommendations", []string{"POST"}},
	{"patch recommendation", "rightsizingrecommendations", []string{"PATCH"}},
	{"checkpoint", "rightsizingcheckpoints", []string{"POST", "PUT", "PATCH"}},
}

// writeCounts reads the recommender's writes so far, by name, from the
// apiserver's /metrics.
func writeCounts(tb testing.TB, cs kubernetes.Interface) map[string]float64 {
	raw, err := apiMetrics(context.Background(), cs)
	require.NoError(tb, err)
	out := map[string]float64{}
	for _, w := range recommenderWrites {
		for _, verb := range w.verbs {
			v, err := sumMetric(raw, "apiserver_request_total", `verb="`+verb+`"`, `resource="`+w.resource+`"`, `subresource=""`)
			require.NoError(tb, err)
			out[w.name] += v
		}
	}
	return out
}

// total sums a writeCounts.
func total(counts map[string]float64) float64 {
	var t float64
	for _, v := range counts {
		t += v
	}
	return t
}

// writeFigures says how many of each of the recommender's writes were
// made between two writeCounts, d apart, and at what rate.
func writeFigures(from, to map[string]float64, d time.Duration) string {
	var parts []string
	for _, w := range recommenderWrites {
		n := to[w.name] - from[w.name]
		parts = append(parts, fmt.Sprintf("%s %.0f (%.1f/s)", w.name, n, n/d.Seconds()))
	}
	return strings.Join(parts, ", ")
}

// passHistogram is kerf_recommender_pass_seconds of one step: its sum, its
// count and its cumulative buckets by upper bound.
type passHistogram struct {
	sum, count float64
	buckets    map[float64]float64
}

// readPasses reads the leader's kerf_recommender_pass_seconds by step.
func readPasses(tb testing.TB, p *leaderProc) map[string]passHistogram {
	raw, err := p.scrape()
	require.NoError(tb, err)
	passes, err := parsePasses(raw)
	require.NoError(tb, err)
	return passes
}

// parsePasses reads kerf_recommender_pass_seconds by step from a
// Prometheus text exposition.
func parsePasses(raw string) (map[string]passHistogram, error) {
	out := map[string]passHistogram{}
	for _, step := range passSteps {
		h, err := parseHistogram(raw, "kerf_recommender_pass_seconds", `step="`+step+`"`)
		if err != nil {
			return nil, err
		}
		out[step] = h
	}
	return out, nil
}

// parseHistogram reads the histogram name from a Prometheus text
// exposition: its series whose labels hold every one of labels
// (`key="value"`), summed.
func parseHistogram(raw, name string, labels ...string) (passHistogram, error) {
	sum, err1 := sumMetric(raw, name+"_sum", labels...)
	n, err2 := sumMetric(raw, name+"_count", labels...)
	if err := errors.Join(err1, err2); err != nil {
		return passHistogram{}, err
	}
	h := passHistogram{sum: sum, count: n, buckets: map[float64]float64{}}
	for line := range strings.SplitSeq(raw, "\n") {
		if !strings.HasPrefix(line, name+"_bucket{") || !containsAll(line, labels) {
			continue
		}
		i := strings.Index(line, `le="`)
		if i < 0 {
			continue
		}
		le := line[i+4:]
		le = le[:max(strings.IndexByte(le, '"'), 0)]
		bound, err := strconv.ParseFloat(le, 64) // "+Inf" parses as +Inf
		if err != nil {
			return passHistogram{}, fmt.Errorf("parse %q: %w", line, err)
		}
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err != nil {
			return passHistogram{}, fmt.Errorf("parse %q: %w", line, err)
		}
		h.buckets[bound] += v
	}
	return h, nil
}

// containsAll reports whether line holds every one of subs.
func containsAll(line string, subs []string) bool {
	for _, s := range subs {
		if !strings.Contains(line, s) {
			return false
		}
	}
	return true
}

// harmWaits are the leader's histograms of its harm signals' waits:
// from the enqueue to the pass, and of that, for the recommendation's
// lock.
type harmWaits struct{ queue, lock passHistogram }

// readHarmWaits reads the leader's harmWaits.
func readHarmWaits(tb testing.TB, p *leaderProc) harmWaits {
	raw, err := p.scrape()
	require.NoError(tb, err)
	queue, err1 := parseHistogram(raw, "kerf_leader_harm_queue_wait_seconds")
	lock, err2 := parseHistogram(raw, "kerf_leader_harm_lock_wait_seconds")
	require.NoError(tb, errors.Join(err1, err2))
	return harmWaits{queue: queue, lock: lock}
}

// logHarmWaits logs the harm signals' waits between two readHarmWaits:
// how many, their mean and the bucket bound the slowest fell under. They
// say where a slow rollback request's time went before its pass began.
func logHarmWaits(tb testing.TB, when string, from, to harmWaits) {
	n := to.queue.count - from.queue.count
	if n <= 0 {
		tb.Logf("the harm signals' requests %s: none", when)
		return
	}
	tb.Logf("the harm signals' requests %s, %.0f: from the enqueue to the pass mean %.1f ms, slowest %s "+
		"(kerf_leader_harm_queue_wait_seconds); of that, waiting for the recommendation's lock mean %.1f ms, slowest %s (kerf_leader_harm_lock_wait_seconds)",
		when, n, 1000*(to.queue.sum-from.queue.sum)/n, slowest(from.queue, to.queue),
		1000*(to.lock.sum-from.lock.sum)/n, slowest(from.lock, to.lock))
}

// slowest is the bucket bound the slowest pass between from and to fell
// under: the lowest whose count grew by all of the passes.
func slowest(from, to passHistogram) string {
	n := to.count - from.count
	bounds := make([]float64, 0, len(to.buckets))
	for le := range to.buckets {
		bounds = append(bounds, le)
	}
	sort.Float64s(bounds)
	for _, le := range bounds {
		if to.buckets[le]-from.buckets[le] >= n {
			if math.IsInf(le, 1) {
				return "above the last bucket"
			}
			return fmt.Sprintf("≤ %.3g s", le)
		}
	}
	return "?"
}

// logPasses logs, per step, the passes between two readPasses: how many,
// their mean and the bucket bound the slowest fell under.
func logPasses(tb testing.TB, when string, from, to map[string]passHistogram) {
	var parts []string
	for _, step := range passSteps {
		a, b := from[step], to[step]
		n := b.count - a.count
		if n <= 0 {
			parts = append(parts, step+" no pass")
			continue
		}
		parts = append(parts, fmt.Sprintf("%s mean %.1f ms, slowest %s", step, 1000*(b.sum-a.sum)/n, slowest(a, b)))
	}
	tb.Logf("the recommender's passes %s (kerf_recommender_pass_seconds, %.0f passes): %s",
		when, to["total"].count-from["total"].count, strings.Join(parts, "; "))
}

// writeSample is the recommender's writes counted so far at a time.
type writeSample struct {
	at     time.Time
	writes float64
}

// peakRate is the highest rate over any window of win in samples.
func peakRate(samples []writeSample, win time.Duration) float64 {
	var peak float64
	for a := range samples {
		for b := a + 1; b < len(samples); b++ {
			if d := samples[b].at.Sub(samples[a].at); d >= win {
				peak = max(peak, (samples[b].writes-samples[a].writes)/d.Seconds())
				break
			}
		}
	}
	return peak
}

// BenchmarkLeaderRecommendingAtScale runs the leader at scale with the
// recommender on: setup, the OOM probes' changes, an idle window, then
// spec.recommend on in every policy, the recommender's wave with OOM kills
// sent during it, and a steady window after. It logs every figure.
func BenchmarkLeaderRecommendingAtScale(b *testing.B) {
	if os.Getenv(scaleEnable) == "" {
		b.Skipf("set %s=1 to run (make bench-scale-recommend)", scaleEnable)
	}
	n := envInt(b, "KERF_SCALE_WORKLOADS", 25000)
	m := envInt(b, "KERF_SCALE_NODES", 1000)
	workers := envInt(b, "KERF_SCALE_WORKERS", 8)
	probes := min(envInt(b, "KERF_SCALE_OOMS", 50), n/2)
	probeGap := envDuration(b, "KERF_SCALE_OOM_GAP", 250*time.Millisecond)
	sampleEvery := envDuration(b, "KERF_SCALE_SAMPLE_INTERVAL", 10*time.Second)
	// The recommender writes --recommender-workers recommendations at
	// once, within its client's rate limit; the leader applies them
	// meanwhile. At 25,000 workloads that is minutes (docs/performance.md).
	waveTimeout := envDuration(b, "KERF_SCALE_WAVE_TIMEOUT", 45*time.Minute)
	idle := envDuration(b, "KERF_SCALE_IDLE", 20*time.Second)
	snapshotEvery := envDuration(b, "KERF_SCALE_SNAPSHOT_INTERVAL", 2*time.Minute)
	minHistory := envDuration(b, "KERF_SCALE_MIN_HISTORY", time.Minute)
	steady := envDuration(b, "KERF_SCALE_STEADY", 2*time.Minute)
	// Every workload but the probes' (their recommendations are the
	// harness's, which the recommender leaves alone) gets one.
	expected := n - probes
	b.Logf("the leader's GOMEMLIMIT: %q (%s), GOGC: %q (%s)", os.Getenv(memLimitEnv), memLimitEnv, os.Getenv(gcPercentEnv), gcPercentEnv)
	b.Logf("workloads %d, nodes %d, harness workers %d, OOM probes %d every %v, usage every %v, the policies' minHistory %v; the leader's flags added: %q (%s)",
		n, m, workers, probes, probeGap, sampleEvery, minHistory, os.Getenv(leaderFlagsEnv), leaderFlagsEnv)

	bc := newBenchCluster(b, n, m, workers, nil)
	ctx, c, cs, s := bc.ctx, bc.c, bc.cs, bc.s
	deps := watchDeployments(ctx, b, c)
	recs := watchRecommended(ctx, b, c)

	leader, u, ag := bc.start(b, "scale-1", sampleEvery)

	probeStart := time.Now()
	probePod := applyProbes(ctx, b, c, s, leader, probes, workers, waveTimeout)
	b.Logf("%d probe changes applied and watched in %v", probes, time.Since(probeStart).Round(time.Millisecond))
	time.Sleep(2 * time.Second) // the new pods reach the leader's cache

	// Idle, the recommender off: the baseline.
	idleFrom := time.Now()
	time.Sleep(idle)
	idleTo := time.Now()
	idleCPU, _ := u.over(idleFrom, idleTo, time.Second)
	idleRSS, _ := leader.memory()
	b.Logf("idle %v, the recommender off: CPU %.0f mCPU, RSS %.0f MiB", idle, idleCPU*1000, float64(idleRSS)/(1<<20))
	leader.goMemory(b, "idle, the recommender off")
	leader.heapProfile(b, "heap-recommend-idle.pb.gz", true)

	// The recommender on: every namespace's policy recommends, strategy
	// Rollout (no kubelet resizes here), after minHistory of usage. The
	// interval is minHistory too: a pass before the history is long enough
	// starts a workload's interval, so the first recommendation comes one
	// interval after the recommender is turned on.
	onAt := time.Now()
	passes0, writes0 := readPasses(b, leader), writeCounts(b, cs)
	for _, ns := range s.namespaces {
		var p v1alpha1.RightsizingPolicy
		require.NoError(b, c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "guard"}, &p))
		p.Spec.Recommend = &v1alpha1.RecommendSpec{Enabled: true, Strategy: v1alpha1.StrategyRollout,
			MinHistory: &metav1.Duration{Duration: minHistory}, Interval: &metav1.Duration{Duration: minHistory}}
		require.NoError(b, c.Update(ctx, &p))
	}
	// The wave's baselines are the last read before its first
	// recommendation was seen, a second at most before it was written.
	var writesW map[string]float64
	var reqsW float64
	var kindsW map[string]float64
	var cp0 map[string]time.Duration
	for recs.count() == 0 {
		leader.alive(b)
		if time.Since(onAt) > minHistory+waveTimeout {
			b.Fatalf("the recommender made no recommendation within minHistory %v and %v", minHistory, waveTimeout)
		}
		writesW, reqsW, kindsW, cp0 = writeCounts(b, cs), leaderRequests(b, cs), requestKinds(b, cs), controlPlaneCPU()
		time.Sleep(time.Second)
	}
	waveFrom := recs.earliest()
	b.Logf("the recommender on → its first recommendation: %v (minHistory and interval %v)", waveFrom.Sub(onAt).Round(time.Millisecond), minHistory)
	historyCPU, _ := u.over(onAt, waveFrom, time.Second)
	historyRSS, _ := u.rssPeak(onAt, waveFrom)
	passesW, harmW := readPasses(b, leader), readHarmWaits(b, leader)
	logPasses(b, "while the history grew", passes0, passesW)
	b.Logf("while the history grew: CPU %.0f mCPU, RSS peak %.0f MiB; the recommender's writes: %s",
		historyCPU*1000, float64(historyRSS)/(1<<20), writeFigures(writes0, writesW, waveFrom.Sub(onAt)))
	leader.heapProfile(b, "heap-recommend-history.pb.gz", true)

	// The wave: the recommender writes and the leader applies; a probe's
	// agent sends an OOM kill every probeGap.
	sent := make([]time.Time, probes)
	duringWave := make([]bool, probes)
	probesDone := make(chan struct{})
	go func() {
		defer close(probesDone)
		for i := range probes {
			time.Sleep(probeGap)
			sent[i] = time.Now()
			duringWave[i] = recs.count() < expected || deps.cpuCount() < expected
			ag.clients[s.podNode[i][0]].OOM(oom.Kill{Source: "bpf", Time: sent[i], Count: 1, Comm: "app"}, string(probePod[i]), "app")
		}
	}()
	samples := []writeSample{{at: waveFrom, writes: total(writesW)}}
	nextSnapshot := time.Now().Add(snapshotEvery)
	for {
		leader.alive(b)
		samples = append(samples, writeSample{at: time.Now(), writes: total(writeCounts(b, cs))})
		if time.Now().After(nextSnapshot) {
			at := time.Since(waveFrom).Round(time.Minute)
			rss, _ := leader.memory()
			b.Logf("%v into the wave: RSS %.0f MiB, %d recommended, %d applied", at, float64(rss)/(1<<20), recs.count(), deps.cpuCount())
			leader.goMemory(b, at.String()+" into the wave")
			// The last GC's live heap, no GC forced: the wave's ordinary
			// heap, which heap-peak.pb.gz's burst is read against
			// (go tool pprof -diff_base).
			leader.heapProfile(b, fmt.Sprintf("heap-wave-%03.0fm.pb.gz", at.Minutes()), false)
			nextSnapshot = nextSnapshot.Add(snapshotEvery)
		}
		_, restored := deps.counts()
		if recs.count() >= expected && deps.cpuCount() >= expected && restored >= probes {
			break
		}
		if time.Since(waveFrom) > waveTimeout {
			b.Logf("wave timeout %v: %d of %d recommended, %d applied, %d of %d probes rolled back",
				waveTimeout, recs.count(), expected, deps.cpuCount(), restored, probes)
			break
		}
		time.Sleep(time.Second)
	}
	<-probesDone
	waveTo := time.Now()
	waveS := waveTo.Sub(waveFrom).Seconds()
	passesE, writesE, reqsE, cp1 := readPasses(b, leader), writeCounts(b, cs), leaderRequests(b, cs), controlPlaneCPU()
	logRequestKinds(b, "during the wave", kindsW, requestKinds(b, cs), waveTo.Sub(waveFrom))
	waveCPU, peakCPU := u.over(waveFrom, waveTo, 10*time.Second)
	wavePeak, wavePeakAt := u.rssPeak(waveFrom, waveTo)
	_, hwm := leader.memory()
	leader.goMemory(b, "at the wave's end")

	applied := deps.cpuTimes()
	slices.SortFunc(applied, func(a, b time.Time) int { return a.Compare(b) })
	lastApply := waveFrom
	if len(applied) > 0 {
		lastApply = applied[len(applied)-1]
	}
	recommendedIn := recs.latest().Sub(waveFrom)
	b.Logf("wave of %d: %d recommended by %v (%.1f a second), %d applied (template CPU lowered) by %v",
		expected, recs.count(), recommendedIn.Round(time.Millisecond), float64(recs.count())/max(recommendedIn.Seconds(), 1),
		len(applied), lastApply.Sub(waveFrom).Round(time.Millisecond))
	logPasses(b, "during the wave", passesW, passesE)
	logHarmWaits(b, "during the wave", harmW, readHarmWaits(b, leader))
	writeRate := (total(writesE) - total(writesW)) / waveS
	peakWrites := peakRate(samples, 10*time.Second)
	b.Logf("the recommender's apiserver writes during the wave (apiserver_request_total): %s; %.1f writes/s, peak (10 s) %.1f/s; the leader's requests %.1f/s in all",
		writeFigures(writesW, writesE, waveTo.Sub(waveFrom)), writeRate, peakWrites, (reqsE-reqsW)/waveS)
	b.Logf("leader during the wave: CPU mean %.0f mCPU, peak (10 s) %.0f mCPU; RSS peak %.0f MiB (%v into it), VmHWM %.0f MiB; kube-apiserver %.0f mCPU, etcd %.0f mCPU",
		waveCPU*1000, peakCPU*1000, float64(wavePeak)/(1<<20), wavePeakAt.Sub(waveFrom).Round(time.Second), float64(hwm)/(1<<20),
		1000*(cp1["kube-apiserver"]-cp0["kube-apiserver"]).Seconds()/waveS, 1000*(cp1["etcd"]-cp0["etcd"]).Seconds()/waveS)

	var lat, latDuring []float64
	for i := range probes {
		_, r := deps.at(i)
		if r.IsZero() {
			continue
		}
		l := float64(r.Sub(sent[i]).Microseconds()) / 1000
		lat = append(lat, l)
		if duringWave[i] {
			latDuring = append(latDuring, l)
		}
	}
	slices.Sort(lat)
	slices.Sort(latDuring)
	b.Logf("OOM kill → rollback write seen: %d of %d probes, p50 %.1f ms, p99 %.1f ms, max %.1f ms; sent while the wave still recommended or applied: %d, p50 %.1f ms, p99 %.1f ms, max %.1f ms",
		len(lat), probes, percentile(lat, 0.5), percentile(lat, 0.99), percentile(lat, 1),
		len(latDuring), percentile(latDuring, 0.5), percentile(latDuring, 0.99), percentile(latDuring, 1))
	killed := map[string]time.Time{}
	for i := range probes {
		killed[s.ns(i)+"/"+workloadName(i)] = sent[i]
	}
	asked := leader.rollbackTimes(b, killed)["breachAsked"]

	// Steady: the recommender keeps running its passes and recommends
	// again every interval, patching what moved.
	steadyFrom, passesS, writesS := time.Now(), readPasses(b, leader), writeCounts(b, cs)
	steadyProfile := leader.cpuProfile(b, "cpu-recommend-steady.pb.gz", max(steady-10*time.Second, time.Second))
	time.Sleep(steady)
	steadyProfile()
	steadyTo := time.Now()
	steadyCPU, _ := u.over(steadyFrom, steadyTo, time.Second)
	steadyRSS, _ := leader.memory()
	logPasses(b, "steady after the wave", passesS, readPasses(b, leader))
	b.Logf("steady %v after the wave, the recommender on: CPU %.0f mCPU, RSS %.0f MiB; the recommender's writes: %s",
		steady, steadyCPU*1000, float64(steadyRSS)/(1<<20), writeFigures(writesS, writeCounts(b, cs), steadyTo.Sub(steadyFrom)))
	leader.goMemory(b, "steady, the recommender on")
	leader.heapProfile(b, "heap-recommend-steady.pb.gz", true)
	u.write(b, "leader-usage-recommend-"+strconv.Itoa(n)+".csv", waveFrom)
	_, hwm = leader.memory()
	top, topAt := u.highest(time.Time{}, time.Now())
	b.Logf("the leader's highest RSS sampled (every second): %.0f MiB, %v from the wave's start: anonymous %.0f MiB (the Go runtime's, which GOMEMLIMIT bounds, and any other), file-backed %.0f MiB (the binary's pages)",
		float64(top.rss)/(1<<20), topAt.Sub(waveFrom).Round(time.Second), float64(top.anon)/(1<<20), float64(top.file)/(1<<20))
	rose, roseAt := u.hwmRise()
	b.Logf("the leader's VmHWM last rose, to %.0f MiB, %v from the wave's start (read every second: within the second before)",
		float64(rose)/(1<<20), roseAt.Sub(waveFrom).Round(time.Second))
	b.Logf("against issue 34's goals (at 25,000 workloads; this run %d): the leader's peak RSS (VmHWM, whole run) %.0f MiB (goal ≤ %d MiB); OOM kill → rollback request (breachAsked) p99 %.1f ms over %d probes, %d of them sent during the wave (goal ≤ %d ms); → restore seen during the wave p99 %.1f ms",
		n, float64(hwm)/(1<<20), goalRSSMiB, percentile(asked, 0.99), len(asked), len(latDuring), goalRollbackP99Ms, percentile(latDuring, 0.99))

	b.ReportMetric(float64(hwm)/(1<<20), "peak-RSS-MiB")
	b.ReportMetric(float64(steadyRSS)/(1<<20), "steady-RSS-MiB")
	b.ReportMetric(waveCPU*1000, "wave-mCPU")
	b.ReportMetric(steadyCPU*1000, "steady-mCPU")
	if d := passesE["recommend"].count - passesW["recommend"].count; d > 0 {
		b.ReportMetric(1000*(passesE["recommend"].sum-passesW["recommend"].sum)/d, "wave-recommend-step-ms")
	}
	b.ReportMetric(recommendedIn.Seconds(), "wave-recommended-s")
	b.ReportMetric(lastApply.Sub(waveFrom).Seconds(), "wave-applied-s")
	b.ReportMetric(writeRate, "rec-writes/s")
	b.ReportMetric(peakWrites, "peak-rec-writes/s")
	b.ReportMetric(percentile(latDuring, 0.99), "wave-rollback-p99-ms")
	b.ReportMetric(percentile(lat, 0.99), "oom-rollback-p99-ms")
	b.ReportMetric(percentile(asked, 0.99), "rollback-request-p99-ms")
}
