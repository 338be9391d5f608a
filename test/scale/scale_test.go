// Package scale measures the leader at a fleet's scale (make bench-scale,
// docs/performance.md "The leader at scale"): the real kerf-leader binary
// on a real kube-apiserver + etcd (test/controlplane, no kubelet, no
// controller-manager) holding N Deployments with their ReplicaSets and
// Running pods on M simulated nodes, whose agents (the real node/stream
// client each, with a real bound token) stream to the leader over TLS.
// make bench-scale-recommend runs it with the recommender on
// (recommend_test.go, "The recommender at scale").
package scale

import (
	"context"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/node/oom"
)

// scaleEnable turns the benchmark on: it takes many minutes and most of
// the machine, so make bench skips it.
const scaleEnable = "KERF_BENCH_SCALE"

// envInt reads a positive integer from name, def when unset.
func envInt(tb testing.TB, name string, def int) int {
	tb.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		tb.Fatalf("%s=%q: want a positive integer", name, v)
	}
	return n
}

// envDuration reads a positive duration from name, def when unset.
func envDuration(tb testing.TB, name string, def time.Duration) time.Duration {
	tb.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		tb.Fatalf("%s=%q: want a positive duration", name, v)
	}
	return d
}

// deployWatch follows every Deployment's template memory: when it first
// reads waveMem the leader's apply reached the apiserver, when it reads
// baseMem again after that its restore did. It also notes when the
// template's CPU request first leaves baseCPU: the recommender's changes
// (recommend_test.go) lower it.
type deployWatch struct {
	mu       sync.Mutex
	applied  map[int]time.Time
	restored map[int]time.Time
	cpuMoved map[int]time.Time
}

// cpuCount is how many Deployments' CPU request has left baseCPU.
func (w *deployWatch) cpuCount() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.cpuMoved)
}

// cpuTimes is when each Deployment's CPU request left baseCPU, in no order.
func (w *deployWatch) cpuTimes() []time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]time.Time, 0, len(w.cpuMoved))
	for _, t := range w.cpuMoved {
		out = append(out, t)
	}
	return out
}

func (w *deployWatch) counts() (applied, restored int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.applied), len(w.restored)
}

func (w *deployWatch) at(i int) (applied, restored time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.applied[i], w.restored[i]
}

// watchDeployments runs w over every Deployment until ctx is done,
// starting again from the last resource version when a watch ends.
func watchDeployments(ctx context.Context, tb testing.TB, c client.WithWatch) *deployWatch {
	w := &deployWatch{applied: map[int]time.Time{}, restored: map[int]time.Time{}, cpuMoved: map[int]time.Time{}}
	var list appsv1.DeploymentList
	require.NoError(tb, c.List(ctx, &list, client.Limit(1)))
	rv := list.ResourceVersion
	go func() {
		for ctx.Err() == nil {
			wi, err := c.Watch(ctx, &appsv1.DeploymentList{}, &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: true}})
			if err != nil {
				time.Sleep(100 * time.Millisecond)
				continue
			}
			for ev := range wi.ResultChan() {
				now := time.Now()
				dep, ok := ev.Object.(*appsv1.Deployment)
				if !ok {
					continue
				}
				rv = dep.ResourceVersion
				if ev.Type != watch.Modified {
					continue
				}
				i, err := strconv.Atoi(strings.TrimPrefix(dep.Name, "w-"))
				if err != nil {
					continue
				}
				mem := dep.Spec.Template.Spec.Containers[0].Resources.Limits.Memory().String()
				cpu := dep.Spec.Template.Spec.Containers[0].Resources.Requests.Cpu().String()
				w.mu.Lock()
				if _, moved := w.cpuMoved[i]; !moved && cpu != baseCPU {
					w.cpuMoved[i] = now
				}
				_, applied := w.applied[i]
				switch {
				case mem == waveMem && !applied:
					w.applied[i] = now
				case mem == baseMem && applied:
					if _, done := w.restored[i]; !done {
						w.restored[i] = now
					}
				}
				w.mu.Unlock()
			}
			wi.Stop()
		}
	}()
	return w
}

func percentile(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(len(sorted)-1, int(float64(len(sorted))*p))]
}

// inPlaceOutcome is when the harness saw the in-place change's phase
// leave Applying, and what it became.
type inPlaceOutcome struct {
	at      time.Time
	phase   v1alpha1.Phase
	message string
}

// pollInPlace reads the recommendation every 100 ms until its phase
// leaves Applying, and sends when and what on the channel it returns.
func pollInPlace(ctx context.Context, c client.Client, key client.ObjectKey) <-chan inPlaceOutcome {
	done := make(chan inPlaceOutcome, 1)
	go func() {
		for ctx.Err() == nil {
			var r v1alpha1.RightsizingRecommendation
			if err := c.Get(ctx, key, &r); err == nil {
				switch r.Status.Phase {
				case v1alpha1.PhaseApplied, v1alpha1.PhaseWatching, v1alpha1.PhaseHealthy, v1alpha1.PhaseRolledBack,
					v1alpha1.PhaseFailed, v1alpha1.PhaseBlocked:
					done <- inPlaceOutcome{at: time.Now(), phase: r.Status.Phase, message: r.Status.Message}
					return
				}
			}
			time.Sleep(100 * time.Millisecond)
		}
	}()
	return done
}

// BenchmarkLeaderAtScale runs the leader at scale: setup, the OOM probes'
// changes, an idle window, the wave with OOM kills sent during it, and the
// connect storm after a restart. It logs every figure and reports them as
// metrics.
func BenchmarkLeaderAtScale(b *testing.B) {
	if os.Getenv(scaleEnable) == "" {
		b.Skipf("set %s=1 to run (make bench-scale)", scaleEnable)
	}
	n := envInt(b, "KERF_SCALE_WORKLOADS", 25000)
	m := envInt(b, "KERF_SCALE_NODES", 1000)
	workers := envInt(b, "KERF_SCALE_WORKERS", 8)
	probes := min(envInt(b, "KERF_SCALE_OOMS", 50), n/2)
	outage := min(envInt(b, "KERF_SCALE_OUTAGE_OOMS", 20), (n-probes)/2)
	inPlaceReplicas := envInt(b, "KERF_SCALE_INPLACE_REPLICAS", 100)
	// The probes are workloads [0, probes), the outage probes [probes,
	// first), the wave the rest.
	first := probes + outage
	probeGap := envDuration(b, "KERF_SCALE_OOM_GAP", 250*time.Millisecond)
	sampleEvery := envDuration(b, "KERF_SCALE_SAMPLE_INTERVAL", 10*time.Second)
	waveTimeout := envDuration(b, "KERF_SCALE_WAVE_TIMEOUT", 15*time.Minute)
	idle := envDuration(b, "KERF_SCALE_IDLE", 20*time.Second)
	snapshotEvery := envDuration(b, "KERF_SCALE_SNAPSHOT_INTERVAL", 2*time.Minute)
	b.Logf("the leader's GOMEMLIMIT: %q (%s), GOGC: %q (%s)", os.Getenv(memLimitEnv), memLimitEnv, os.Getenv(gcPercentEnv), gcPercentEnv)
	b.Logf("workloads %d, nodes %d, harness workers %d, OOM probes %d every %v, outage OOM probes %d, in-place replicas %d, counters every %v",
		n, m, workers, probes, probeGap, outage, inPlaceReplicas, sampleEvery)

	var resizes *resizeWatch
	bc := newBenchCluster(b, n, m, workers, func(ctx context.Context, c client.WithWatch, s *sim) {
		populateInPlace(b, c, s, inPlaceReplicas)
		resizes = kubeletResizes(ctx, b, c, s.ns(0), inPlaceName, inPlaceReplicas)
	})
	ctx, c, cs, s, args := bc.ctx, bc.c, bc.cs, bc.s, bc.args
	deps := watchDeployments(ctx, b, c)

	// The leader starts on the populated cluster; the agents connect.
	leader, u, ag := bc.start(b, "scale-1", sampleEvery)

	// The OOM probes (and the outage probes of the connect storm): the
	// first workloads' changes are applied and watched, and a pod of the
	// new template runs on its node.
	probeStart := time.Now()
	probePod := applyProbes(ctx, b, c, s, leader, first, workers, waveTimeout)
	b.Logf("%d probe changes applied and watched in %v", first, time.Since(probeStart).Round(time.Millisecond))
	time.Sleep(2 * time.Second) // the new pods reach the leader's cache

	// Idle: everything synced, the agents streaming.
	idleFrom, reqIdle0, kindsIdle0 := time.Now(), leaderRequests(b, cs), requestKinds(b, cs)
	time.Sleep(idle)
	idleTo, reqIdle1 := time.Now(), leaderRequests(b, cs)
	logRequestKinds(b, "while idle", kindsIdle0, requestKinds(b, cs), idleTo.Sub(idleFrom))
	idleCPU, _ := u.over(idleFrom, idleTo, time.Second)
	idleRSS, _ := leader.memory()
	b.Logf("idle %v: CPU %.0f mCPU, RSS %.0f MiB, %.1f requests/s", idle, idleCPU*1000, float64(idleRSS)/(1<<20), (reqIdle1-reqIdle0)/idleTo.Sub(idleFrom).Seconds())
	leader.goMemory(b, "idle")
	leader.heapProfile(b, "leader-heap-"+strconv.Itoa(n)+".pb.gz", true)

	// The wave: a recommendation for every other workload at once, the
	// in-place workload's (strategy InPlace: the leader resizes its pods)
	// first, and the probes' OOM kills while it runs.
	wave := n - first
	waveFrom, reqWave0, resize0, harness0, cp0 := time.Now(), leaderRequests(b, cs), resizeRequests(b, cs), harnessCPU(), controlPlaneCPU()
	apiWave0 := readAPITimings(b, cs)
	waveProfiled := leader.cpuProfile(b, "leader-cpu-"+strconv.Itoa(n)+"-wave.pb.gz", 60*time.Second)
	inPlaceRec := recommendationFor(s.ns(0), inPlaceName, v1alpha1.StrategyInPlace, inPlaceMem)
	require.NoError(b, c.Create(ctx, inPlaceRec))
	inPlaceAt := time.Now()
	// Its phase is polled from now on, beside the wave's creation (the
	// loop below starts once every recommendation is created: polled
	// there, the in-place apply was "recorded" no sooner than the wave's
	// creation ended, 1 min 40 s at 25,000 workloads, whatever the leader
	// did).
	inPlaceDone := pollInPlace(ctx, c, client.ObjectKeyFromObject(inPlaceRec))
	created := make(chan error, 1)
	go func() {
		created <- pool(ctx, wave, workers, func(ctx context.Context, k int) error {
			i := first + k
			return c.Create(ctx, recommendation(s.ns(i), i, waveMem))
		})
	}()
	sent := make([]time.Time, probes)
	appliedAtSend := make([]int, probes)
	for i := range probes {
		time.Sleep(probeGap)
		sent[i] = time.Now()
		appliedAtSend[i], _ = deps.counts()
		ag.clients[s.podNode[i][0]].OOM(oom.Kill{Source: "bpf", Time: sent[i], Count: 1, Comm: "app"}, string(probePod[i]), "app")
	}
	require.NoError(b, <-created)
	createdAt := time.Now()
	var inPlaceDoneAt time.Time // the in-place change's phase left Applying
	var inPlacePhase v1alpha1.Phase
	var inPlaceMsg string
	nextSnapshot := waveFrom.Add(snapshotEvery)
	for {
		leader.alive(b)
		if time.Now().After(nextSnapshot) {
			// What the leader holds as the wave goes on: its Go memory
			// and (with $KERF_SCALE_PROFILE) the heap at its last GC.
			at := time.Since(waveFrom).Round(time.Minute)
			rss, _ := leader.memory()
			b.Logf("%v into the wave: RSS %.0f MiB", at, float64(rss)/(1<<20))
			leader.goMemory(b, at.String()+" into the wave")
			leader.heapProfile(b, "leader-heap-"+strconv.Itoa(n)+"-wave-"+at.String()+".pb.gz", false)
			nextSnapshot = nextSnapshot.Add(snapshotEvery)
		}
		applied, restored := deps.counts()
		if inPlaceDoneAt.IsZero() {
			select {
			case o := <-inPlaceDone:
				inPlaceDoneAt, inPlacePhase, inPlaceMsg = o.at, o.phase, o.message
			default:
			}
		}
		if applied >= n && restored >= probes && !inPlaceDoneAt.IsZero() {
			break
		}
		if time.Since(waveFrom) > waveTimeout {
			seen, held := resizes.counts()
			b.Logf("wave timeout %v: %d of %d applied, %d of %d probes rolled back, %d of %d pods resized (%d taken hold)",
				waveTimeout, applied-first, wave, restored, probes, seen, inPlaceReplicas, held)
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	waveTo, reqWave1, resize1, harness1, cp1 := time.Now(), leaderRequests(b, cs), resizeRequests(b, cs), harnessCPU(), controlPlaneCPU()
	_, peakRSS := leader.memory()
	waveRSS, _ := leader.memory()
	waveCPU, peakCPU := u.over(waveFrom, waveTo, 10*time.Second)
	logAPITimings(b, "during the wave", apiWave0, readAPITimings(b, cs))
	leader.goMemory(b, "at the wave's end")
	waveProfiled()
	leader.heapProfile(b, "leader-heap-"+strconv.Itoa(n)+"-wave.pb.gz", true)

	var applyTimes []time.Time
	for i := first; i < n; i++ {
		if a, _ := deps.at(i); !a.IsZero() {
			applyTimes = append(applyTimes, a)
		}
	}
	slices.SortFunc(applyTimes, func(a, b time.Time) int { return a.Compare(b) })
	var applyRate, peakApplyRate float64
	if len(applyTimes) > 0 {
		applyRate = float64(len(applyTimes)) / applyTimes[len(applyTimes)-1].Sub(waveFrom).Seconds()
		for a, t := range applyTimes { // the most applies within any second
			e, _ := slices.BinarySearchFunc(applyTimes, t.Add(time.Second), func(x, y time.Time) int { return x.Compare(y) })
			peakApplyRate = max(peakApplyRate, float64(e-a))
		}
	}
	var lat []float64
	during := 0
	for i := range probes {
		_, r := deps.at(i)
		if r.IsZero() {
			continue
		}
		lat = append(lat, float64(r.Sub(sent[i]).Microseconds())/1000)
		if appliedAtSend[i]-first < wave {
			during++
		}
	}
	// The in-place apply: from its recommendation's creation until every
	// pod's spec carries the new memory (the harness's pod watch), until
	// the harness, as the kubelet, wrote every pod's resized status, and
	// until the leader recorded the outcome; and the probes whose OOM kill
	// was sent while the resizes ran.
	seenN, heldN := resizes.counts()
	firstResize, lastResize, lastHeld := resizes.span()
	resizeReqs := resize1 - resize0
	writes, conflicts, failures := resizes.writeCounts()
	inPlaceEnd := lastResize
	if seenN < inPlaceReplicas || inPlaceEnd.IsZero() {
		inPlaceEnd = waveTo
	}
	var resizeRate float64
	if seenN > 1 && lastResize.After(firstResize) {
		resizeRate = float64(seenN-1) / lastResize.Sub(firstResize).Seconds()
	}
	// The probes' latencies while the resizes ran and after the last one.
	var latDuring, latAfter []float64
	for i := range probes {
		_, r := deps.at(i)
		if r.IsZero() || sent[i].Before(inPlaceAt) {
			continue
		}
		l := float64(r.Sub(sent[i]).Microseconds()) / 1000
		if sent[i].After(inPlaceEnd) {
			latAfter = append(latAfter, l)
		} else {
			latDuring = append(latDuring, l)
		}
	}
	slices.Sort(latDuring)
	slices.Sort(latAfter)
	slices.Sort(lat)
	reqRate := (reqWave1 - reqWave0) / waveTo.Sub(waveFrom).Seconds()
	b.Logf("wave of %d: created in %v, %d applied by %v (%.1f applied/s, peak %.0f in one second)",
		wave, createdAt.Sub(waveFrom).Round(time.Millisecond), len(applyTimes), waveTo.Sub(waveFrom).Round(time.Millisecond), applyRate, peakApplyRate)
	b.Logf("leader during the wave: CPU mean %.0f mCPU, peak (10 s) %.0f mCPU; RSS %.0f MiB, peak %.0f MiB; %.1f apiserver requests/s; the harness's own CPU %.0f mCPU",
		waveCPU*1000, peakCPU*1000, float64(waveRSS)/(1<<20), float64(peakRSS)/(1<<20), reqRate,
		1000*(harness1-harness0).Seconds()/waveTo.Sub(waveFrom).Seconds())
	startPeak, startAt := u.rssPeak(leader.started, probeStart)
	probesPeak, _ := u.rssPeak(probeStart, idleFrom)
	idlePeak, _ := u.rssPeak(idleFrom, idleTo)
	wavePeak, wavePeakAt := u.rssPeak(waveFrom, waveTo)
	b.Logf("the leader's RSS, highest sampled (every second): from its start until the agents connected %.0f MiB (%v after its start), the probes %.0f MiB, idle %.0f MiB, the wave %.0f MiB (%v into it)",
		float64(startPeak)/(1<<20), startAt.Sub(leader.started).Round(time.Second), float64(probesPeak)/(1<<20),
		float64(idlePeak)/(1<<20), float64(wavePeak)/(1<<20), wavePeakAt.Sub(waveFrom).Round(time.Second))
	u.write(b, "leader-usage-"+strconv.Itoa(n)+".csv", waveFrom)
	b.Logf("the machine's cores during the wave: kube-apiserver %.0f mCPU, etcd %.0f mCPU (the leader's and the harness's above)",
		1000*(cp1["kube-apiserver"]-cp0["kube-apiserver"]).Seconds()/waveTo.Sub(waveFrom).Seconds(),
		1000*(cp1["etcd"]-cp0["etcd"]).Seconds()/waveTo.Sub(waveFrom).Seconds())
	// How long the harm signals' requests waited for their pass (the
	// leader's own metric).
	harmWait, err := leader.metric("kerf_leader_harm_queue_wait_seconds_sum")
	if err != nil {
		b.Logf("kerf_leader_harm_queue_wait_seconds: %v", err)
	}
	harmN, _ := leader.metric("kerf_leader_harm_queue_wait_seconds_count")
	lockWait, _ := leader.metric("kerf_leader_harm_lock_wait_seconds_sum")
	budgetWait, _ := leader.metric("kerf_leader_rollback_client_wait_seconds_sum")
	budgetN, _ := leader.metric("kerf_leader_rollback_client_wait_seconds_count")
	b.Logf("the leader's harm requests: %.0f, waiting %.1f ms on average for their pass (kerf_leader_harm_queue_wait_seconds), %.1f ms of it for a pass of the recommendation in the other path (kerf_leader_harm_lock_wait_seconds); the rollbacks' requests: %.0f, waiting %.1f ms on average for their client's rate limit",
		harmN, 1000*harmWait/max(harmN, 1), 1000*lockWait/max(harmN, 1), budgetN, 1000*budgetWait/max(budgetN, 1))
	b.Logf("OOM kill → rollback write seen: %d of %d probes (%d sent while the wave was still applying): p50 %.1f ms, p99 %.1f ms, max %.1f ms",
		len(lat), probes, during, percentile(lat, 0.5), percentile(lat, 0.99), percentile(lat, 1))
	killed := map[string]time.Time{}
	for i := range probes {
		killed[s.ns(i)+"/"+workloadName(i)] = sent[i]
	}
	leader.rollbackTimes(b, killed)
	since := func(t time.Time) string {
		if t.IsZero() {
			return "never"
		}
		return t.Sub(inPlaceAt).Round(time.Millisecond).String()
	}
	inPlaceAll := "not all"
	if seenN >= inPlaceReplicas {
		inPlaceAll = since(lastResize)
	}
	heldAll := "not all"
	if heldN >= inPlaceReplicas {
		heldAll = since(lastHeld)
	}
	b.Logf("in-place apply of %d replicas: %d pods resized (spec) after %s, %d taken hold (status written as the kubelet would) after %s, the leader recorded %q after %s; %.0f pods/resize requests (%.1f resizes/s seen from the first to the last; harness status writes %d, %d conflicts, %d failed)",
		inPlaceReplicas, seenN, inPlaceAll, heldN, heldAll, inPlacePhase, since(inPlaceDoneAt), resizeReqs, resizeRate,
		writes, conflicts, failures)
	if inPlacePhase == v1alpha1.PhaseFailed || inPlacePhase == v1alpha1.PhaseBlocked {
		b.Logf("in-place apply ended %s: %s", inPlacePhase, inPlaceMsg)
	}
	b.Logf("OOM kill → rollback write seen, probes sent while the in-place apply resized: %d, p50 %.1f ms, max %.1f ms; sent after its last resize: %d, p50 %.1f ms, max %.1f ms",
		len(latDuring), percentile(latDuring, 0.5), percentile(latDuring, 1), len(latAfter), percentile(latAfter, 0.5), percentile(latAfter, 1))

	// The connect storm: the leader restarts; every agent reconnects.
	// While no leader runs, the outage probes' agents record an OOM kill
	// each: node/stream's client keeps it until a leader acknowledges it.
	tr0 := tokenReviews(b, cs)
	stopAt := time.Now()
	leader.stop(b)
	for ag.connected() > 0 && time.Since(stopAt) < 30*time.Second {
		time.Sleep(20 * time.Millisecond)
	}
	restoredBefore := 0
	for i := probes; i < first; i++ {
		if _, r := deps.at(i); !r.IsZero() {
			restoredBefore++
		}
	}
	buffered0 := ag.bufferedOOM(b)
	for i := probes; i < first; i++ {
		ag.clients[s.podNode[i][0]].OOM(oom.Kill{Source: "bpf", Time: time.Now(), Count: 1, Comm: "app"}, string(probePod[i]), "app")
	}
	buffered := ag.bufferedOOM(b) - buffered0
	restart := time.Now()
	leader2 := startLeader(b, args, "scale-2")
	var leadAt time.Time
	go func() {
		for ctx.Err() == nil {
			var lease coordinationv1.Lease
			if err := c.Get(ctx, client.ObjectKey{Namespace: kerfNS, Name: "kerf-leader"}, &lease); err == nil &&
				lease.Spec.HolderIdentity != nil && *lease.Spec.HolderIdentity == "scale-2" {
				leadAt = time.Now()
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
	}()
	tStorm := ag.waitConnected(b, leader2, 15*time.Minute)
	trs := tokenReviews(b, cs) - tr0
	// The outage's events are counted when their changes are rolled back.
	var countedAt []time.Time
	for {
		countedAt = countedAt[:0]
		for i := probes; i < first; i++ {
			if _, r := deps.at(i); r.After(restart) {
				countedAt = append(countedAt, r)
			}
		}
		if len(countedAt) >= outage || time.Since(restart) > waveTimeout {
			break
		}
		leader2.alive(b)
		time.Sleep(100 * time.Millisecond)
	}
	slices.SortFunc(countedAt, func(a, b time.Time) int { return a.Compare(b) })
	countedIn := "not all"
	var countedS float64
	if len(countedAt) >= outage && outage > 0 {
		countedIn = countedAt[len(countedAt)-1].Sub(restart).Round(time.Millisecond).String()
		countedS = countedAt[len(countedAt)-1].Sub(restart).Seconds()
	}
	stillBuffered := ag.bufferedOOM(b)
	leaderCounter := func(name string) float64 {
		v, err := leader2.metric(name)
		if err != nil {
			b.Logf("%s: %v", name, err)
		}
		return v
	}
	_, storm2RSS := leader2.memory()
	leadIn := "not seen"
	if !leadAt.IsZero() {
		leadIn = leadAt.Sub(restart).Round(time.Millisecond).String()
	}
	b.Logf("connect storm: leader restarted (stop took %v); Lease held after %s; all %d agents back after %v; %.0f TokenReviews; new leader's peak RSS %.0f MiB",
		restart.Sub(stopAt).Round(time.Millisecond), leadIn, m, tStorm.Round(time.Millisecond), trs, float64(storm2RSS)/(1<<20))
	b.Logf("connect storm: events buffered during the outage: %d (OOM kills recorded: %d, of outage probes rolled back before it: %d), counted by the new leader: %d (their rollbacks written), time until counted: %s after the restart; agents' buffered OOM events left: %d; the new leader's kerf_stream_oom_events: resent %.0f, pending %.0f, pending counted %.0f, expired %.0f; dropped reports %.0f",
		buffered, outage, restoredBefore, len(countedAt), countedIn, stillBuffered,
		leaderCounter("kerf_stream_oom_events_resent_total"), leaderCounter("kerf_stream_oom_events_pending"),
		leaderCounter("kerf_stream_oom_events_pending_counted_total"), leaderCounter("kerf_stream_oom_events_expired_total"),
		leaderCounter("kerf_stream_dropped_reports_total"))

	b.ReportMetric(waveCPU*1000, "wave-mCPU")
	b.ReportMetric(peakCPU*1000, "peak-mCPU")
	b.ReportMetric(float64(peakRSS)/(1<<20), "peak-RSS-MiB")
	b.ReportMetric(applyRate, "applied/s")
	b.ReportMetric(reqRate, "requests/s")
	b.ReportMetric(percentile(lat, 0.5), "oom-rollback-p50-ms")
	b.ReportMetric(percentile(lat, 0.99), "oom-rollback-p99-ms")
	b.ReportMetric(secondsSince(lastResize, inPlaceAt, seenN >= inPlaceReplicas), "inplace-resized-s")
	b.ReportMetric(resizeRate, "resizes/s")
	b.ReportMetric(tStorm.Seconds(), "storm-s")
	b.ReportMetric(float64(buffered), "storm-buffered-ooms")
	b.ReportMetric(float64(len(countedAt)), "storm-counted-ooms")
	b.ReportMetric(countedS, "storm-counted-s")
	b.ReportMetric(trs, "storm-tokenreviews")
}

// applyProbes gives workloads [0, count) a recommendation (memory baseMem
// → waveMem, strategy Rollout), waits until the leader watches every one,
// and creates each a pod of the new template on its first pod's node, as
// the controller-manager would after the rollout. It returns those pods'
// UIDs, whose OOM kills the probes send.
func applyProbes(ctx context.Context, tb testing.TB, c client.Client, s *sim, leader *leaderProc, count, workers int, timeout time.Duration) []types.UID {
	tb.Helper()
	for i := range count {
		require.NoError(tb, c.Create(ctx, recommendation(s.ns(i), i, waveMem)))
	}
	require.Eventually(tb, func() bool {
		leader.alive(tb)
		var l v1alpha1.RightsizingRecommendationList
		require.NoError(tb, c.List(ctx, &l))
		watching := 0
		for _, r := range l.Items {
			if r.Status.Phase == v1alpha1.PhaseWatching {
				watching++
			}
		}
		return watching >= count
	}, timeout, 200*time.Millisecond, "the probes' changes were never all watched")
	probePod := make([]types.UID, count)
	require.NoError(tb, pool(ctx, count, workers, func(ctx context.Context, i int) error {
		var dep appsv1.Deployment
		if err := c.Get(ctx, client.ObjectKey{Namespace: s.ns(i), Name: workloadName(i)}, &dep); err != nil {
			return err
		}
		uids, err := replicaSetAndPods(ctx, c, &dep, []string{s.nodes[s.podNode[i][0]]})
		if err != nil {
			return err
		}
		probePod[i] = uids[0]
		return nil
	}))
	return probePod
}

// secondsSince is t - from in seconds when ok, else 0.
func secondsSince(t, from time.Time, ok bool) float64 {
	if !ok || t.IsZero() {
		return 0
	}
	return t.Sub(from).Seconds()
}
