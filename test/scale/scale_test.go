// Package scale measures the leader at a fleet's scale (make bench-scale,
// docs/performance.md "The leader at scale"): the real kerf-leader binary
// on a real kube-apiserver + etcd (test/controlplane, no kubelet, no
// controller-manager) holding N Deployments with their ReplicaSets and
// Running pods on M simulated nodes, whose agents (the real node/stream
// client each, with a real bound token) stream to the leader over TLS.
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
	"github.com/kerf-dev/kerf/test/controlplane"
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
// baseMem again after that its restore did.
type deployWatch struct {
	mu       sync.Mutex
	applied  map[int]time.Time
	restored map[int]time.Time
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
	w := &deployWatch{applied: map[int]time.Time{}, restored: map[int]time.Time{}}
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
				w.mu.Lock()
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

// usage samples the leader's CPU every second.
type usage struct {
	mu    sync.Mutex
	times []time.Time
	cpus  []time.Duration
}

func sampleUsage(ctx context.Context, p *leaderProc) *usage {
	u := &usage{}
	go func() {
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			u.mu.Lock()
			u.times, u.cpus = append(u.times, time.Now()), append(u.cpus, p.cpu())
			u.mu.Unlock()
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return u
}

// over returns the mean CPU (cores) between from and to, and the highest
// mean over any window of win within it.
func (u *usage) over(from, to time.Time, win time.Duration) (mean, peak float64) {
	u.mu.Lock()
	defer u.mu.Unlock()
	var ts []time.Time
	var cs []time.Duration
	for k, t := range u.times {
		if !t.Before(from) && !t.After(to) {
			ts, cs = append(ts, t), append(cs, u.cpus[k])
		}
	}
	if len(ts) < 2 {
		return 0, 0
	}
	mean = (cs[len(cs)-1] - cs[0]).Seconds() / ts[len(ts)-1].Sub(ts[0]).Seconds()
	for a := range ts {
		for b := a + 1; b < len(ts); b++ {
			if ts[b].Sub(ts[a]) >= win {
				peak = max(peak, (cs[b]-cs[a]).Seconds()/ts[b].Sub(ts[a]).Seconds())
				break
			}
		}
	}
	return mean, peak
}

func percentile(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(len(sorted)-1, int(float64(len(sorted))*p))]
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
	probeGap := envDuration(b, "KERF_SCALE_OOM_GAP", 250*time.Millisecond)
	sampleEvery := envDuration(b, "KERF_SCALE_SAMPLE_INTERVAL", 10*time.Second)
	waveTimeout := envDuration(b, "KERF_SCALE_WAVE_TIMEOUT", 15*time.Minute)
	idle := envDuration(b, "KERF_SCALE_IDLE", 20*time.Second)
	b.Logf("workloads %d, nodes %d, harness workers %d, OOM probes %d every %v, counters every %v",
		n, m, workers, probes, probeGap, sampleEvery)

	cp := controlplane.StartForTest(b)
	c, cs := fastClient(b, cp.Config)
	dir := b.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	b.Cleanup(cancel)

	s := &sim{n: n, m: m}
	leaderKubeconfig := identities(b, c, cs, cp.Config, dir)
	populate(b, c, s, workers)
	tokens := agentTokens(b, c, cs, s, dir, workers)
	caPool := streamCert(b, dir)
	args := leaderArgs{bin: buildLeader(b, dir), kubeconfig: leaderKubeconfig, streamAddr: freeAddr(b), certDir: dir, dir: dir}
	deps := watchDeployments(ctx, b, c)

	// The leader starts on the populated cluster; the agents connect.
	leader := startLeader(b, args, "scale-1")
	u := sampleUsage(ctx, leader)
	ag := startAgents(b, s, args.streamAddr, caPool, tokens)
	tConnect := ag.waitConnected(b, leader, 10*time.Minute)
	b.Logf("leader start → %d agents connected: %v", m, tConnect.Round(time.Millisecond))
	go sendCounters(ctx, s, ag, sampleEvery)

	// The OOM probes: the first workloads' changes are applied and
	// watched, and a pod of the new template runs on its node.
	probeStart := time.Now()
	for i := range probes {
		require.NoError(b, c.Create(ctx, recommendation(s.ns(i), i, waveMem)))
	}
	probePod := make([]types.UID, probes)
	require.Eventually(b, func() bool {
		leader.alive(b)
		var l v1alpha1.RightsizingRecommendationList
		require.NoError(b, c.List(ctx, &l))
		watching := 0
		for _, r := range l.Items {
			if r.Status.Phase == v1alpha1.PhaseWatching {
				watching++
			}
		}
		return watching >= probes
	}, waveTimeout, 200*time.Millisecond, "the probes' changes were never all watched")
	b.Logf("%d probe changes applied and watched in %v", probes, time.Since(probeStart).Round(time.Millisecond))
	require.NoError(b, pool(ctx, probes, workers, func(ctx context.Context, i int) error {
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
	time.Sleep(2 * time.Second) // the new pods reach the leader's cache

	// Idle: everything synced, the agents streaming.
	idleFrom, reqIdle0 := time.Now(), leaderRequests(b, cs)
	time.Sleep(idle)
	idleTo, reqIdle1 := time.Now(), leaderRequests(b, cs)
	idleCPU, _ := u.over(idleFrom, idleTo, time.Second)
	idleRSS, _ := leader.memory()
	b.Logf("idle %v: CPU %.0f mCPU, RSS %.0f MiB, %.1f requests/s", idle, idleCPU*1000, float64(idleRSS)/(1<<20), (reqIdle1-reqIdle0)/idleTo.Sub(idleFrom).Seconds())
	leader.heapProfile(b, "leader-heap-"+strconv.Itoa(n)+".pb.gz")

	// The wave: a recommendation for every other workload at once, and
	// the probes' OOM kills while it runs.
	wave := n - probes
	waveFrom, reqWave0 := time.Now(), leaderRequests(b, cs)
	created := make(chan error, 1)
	go func() {
		created <- pool(ctx, wave, workers, func(ctx context.Context, k int) error {
			i := probes + k
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
	for {
		leader.alive(b)
		applied, restored := deps.counts()
		if applied >= n && restored >= probes {
			break
		}
		if time.Since(waveFrom) > waveTimeout {
			b.Logf("wave timeout %v: %d of %d applied, %d of %d probes rolled back", waveTimeout, applied-probes, wave, restored, probes)
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	waveTo, reqWave1 := time.Now(), leaderRequests(b, cs)
	_, peakRSS := leader.memory()
	waveRSS, _ := leader.memory()
	waveCPU, peakCPU := u.over(waveFrom, waveTo, 10*time.Second)

	var applyTimes []time.Time
	for i := probes; i < n; i++ {
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
		if appliedAtSend[i]-probes < wave {
			during++
		}
	}
	slices.Sort(lat)
	reqRate := (reqWave1 - reqWave0) / waveTo.Sub(waveFrom).Seconds()
	b.Logf("wave of %d: created in %v, %d applied by %v (%.1f applied/s, peak %.0f in one second)",
		wave, createdAt.Sub(waveFrom).Round(time.Millisecond), len(applyTimes), waveTo.Sub(waveFrom).Round(time.Millisecond), applyRate, peakApplyRate)
	b.Logf("leader during the wave: CPU mean %.0f mCPU, peak (10 s) %.0f mCPU; RSS %.0f MiB, peak %.0f MiB; %.1f apiserver requests/s",
		waveCPU*1000, peakCPU*1000, float64(waveRSS)/(1<<20), float64(peakRSS)/(1<<20), reqRate)
	b.Logf("OOM kill → rollback write seen: %d of %d probes (%d sent while the wave was still applying): p50 %.1f ms, p99 %.1f ms, max %.1f ms",
		len(lat), probes, during, percentile(lat, 0.5), percentile(lat, 0.99), percentile(lat, 1))

	// The connect storm: the leader restarts; every agent reconnects.
	tr0 := tokenReviews(b, cs)
	stopAt := time.Now()
	leader.stop(b)
	for ag.connected() > 0 && time.Since(stopAt) < 30*time.Second {
		time.Sleep(20 * time.Millisecond)
	}
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
	_, storm2RSS := leader2.memory()
	leadIn := "not seen"
	if !leadAt.IsZero() {
		leadIn = leadAt.Sub(restart).Round(time.Millisecond).String()
	}
	b.Logf("connect storm: leader restarted (stop took %v); Lease held after %s; all %d agents back after %v; %.0f TokenReviews; new leader's peak RSS %.0f MiB",
		restart.Sub(stopAt).Round(time.Millisecond), leadIn, m, tStorm.Round(time.Millisecond), trs, float64(storm2RSS)/(1<<20))

	b.ReportMetric(waveCPU*1000, "wave-mCPU")
	b.ReportMetric(peakCPU*1000, "peak-mCPU")
	b.ReportMetric(float64(peakRSS)/(1<<20), "peak-RSS-MiB")
	b.ReportMetric(applyRate, "applied/s")
	b.ReportMetric(reqRate, "requests/s")
	b.ReportMetric(percentile(lat, 0.5), "oom-rollback-p50-ms")
	b.ReportMetric(percentile(lat, 0.99), "oom-rollback-p99-ms")
	b.ReportMetric(tStorm.Seconds(), "storm-s")
	b.ReportMetric(trs, "storm-tokenreviews")
}
