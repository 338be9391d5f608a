// Package peers measures Kerf's agent side by side with its peers on this
// machine (make bench-peers, docs/performance.md): the real kerf-agent
// binary and cadvisor (./cadvisor) watching the same real cgroups, scraped
// by the same real Prometheus at the same interval.
package peers

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/kerf-dev/kerf/internal/kube"
	"github.com/kerf-dev/kerf/test/agenttest"
	"github.com/kerf-dev/kerf/test/controlplane"
	"github.com/kerf-dev/kerf/test/kerneltest"
	"github.com/kerf-dev/kerf/test/leadertest"
	"github.com/kerf-dev/kerf/test/promtest"
	"github.com/kerf-dev/kerf/test/streamtest"
)

const (
	peersNode      = "kerf-peers-node"
	peersNamespace = "kerf-peers"
	peersAgentSA   = "kerf-agent"
	peersPromSA    = "prometheus"
	peersAudience  = "kerf-leader"
	// peersPods × peersContainers is the agent budget's node (docs/design.md
	// section 5): 330 containers.
	peersPods       = 110
	peersContainers = 3
	// peersThrottled containers run a busy loop under a 2 ms / 100 ms CFS
	// quota; the next peersAllocating hold 32 MiB each; the next
	// peersOOM are OOM-killed i+1 times each (memory limit 32 MiB, 64 MiB
	// asked) in the counts phase, paced under the kernel's rate limit on
	// OOM reports; the one after them takes a burst of peersBurst kills.
	peersThrottled  = 10
	peersAllocating = 10
	peersOOM        = 5
	peersBurst      = 15
	// peersKillPace spaces the paced kills: the kernel prints the report
	// of at most 10 OOM kills per 5 s (oom_kill_process's ratelimit,
	// DEFAULT_RATELIMIT_INTERVAL and _BURST) and drops the rest's, which
	// is all /dev/kmsg, cadvisor's source, has.
	peersKillPace = 700 * time.Millisecond
)

// peersEnable names the variable make bench-peers sets: the benchmark
// takes about 15 minutes, so make bench (every package's benchmarks)
// skips it.
const peersEnable = "KERF_BENCH_PEERS"

// peersRunsEnv, peersWarmupEnv and peersWindowEnv change the number of
// runs per interval (default 3), how long both run before they are
// measured (default 60s: with the settling before it, cadvisor's
// in-memory stats, --storage_duration=2m as in the kubelet, are full by
// the end of the window, where its RSS is read) and each run's measured
// window (default 60s).
const (
	peersRunsEnv   = "KERF_PEERS_RUNS"
	peersWarmupEnv = "KERF_PEERS_WARMUP"
	peersWindowEnv = "KERF_PEERS_WINDOW"
)

// fixture is what every run shares: the node's cgroups and pods, the
// binaries, the leader stream, the scrape token.
type fixture struct {
	cp                    *controlplane.ControlPlane
	node                  *agenttest.Node
	agentBin, cadvisorBin string
	agentArgs             []string
	workload              string      // kerf-workload, for the OOM kills
	promToken             string      // a file with the Prometheus service account's token
	promScrapeToken       string      // the token itself, for the benchmark's own scrapes of the agent
	busy                  []*exec.Cmd // the throttled loops
}

// BenchmarkAgentAgainstCadvisor runs the real kerf-agent binary (built as
// hack/build.sh builds it, --interval=1s, pods from a real apiserver, a
// real leader stream) and cadvisor (./cadvisor: its manager and metrics
// packages, raw cgroup factory, cpu, memory and oom_event metrics,
// --housekeeping_interval=1s without dynamic housekeeping) over the same
// 330 real v1 cgroups (110 pods × 3 containers in the kubelet's cgroupfs
// layout; some throttled, some holding memory), both scraped by one real
// Prometheus every 1 s, then every 15 s (scrape_timeout = the interval).
// Each run starts both afresh and, once both see the 330 containers and a
// warm-up has passed (KERF_PEERS_WARMUP, 60 s: cadvisor's 2 min of
// in-memory stats are full by the window's end), measures them over the
// same window (KERF_PEERS_WINDOW, 60 s): CPU (utime+stime of
// /proc/<pid>/stat over wall time), VmRSS (anonymous and file) at the end
// and VmHWM, and per target Prometheus' scrape_duration_seconds (median of
// the window), samples per scrape and the scrapes that failed (up == 0). It prints a table per interval: medians and min–max over
// the runs, and cadvisor's figure over the agent's. Then it OOM-kills
// containers a known number of times, stops the throttled loops, and
// checks through Prometheus that both report the same
// container_cpu_cfs_throttled_periods_total and container_oom_events_total
// for every container (matched by cgroup path: cadvisor's id label, the
// agent's namespace, pod and container).
func BenchmarkAgentAgainstCadvisor(b *testing.B) {
	if os.Getenv(peersEnable) == "" {
		b.Skipf("about 15 minutes: run by make bench-peers (%s=1)", peersEnable)
	}
	promtest.NeedBinary(b)
	f := setup(b)
	runs, window := envInt(b, peersRunsEnv, 3), envDuration(b, peersWindowEnv, 60*time.Second)
	warmup := envDuration(b, peersWarmupEnv, 60*time.Second)
	for _, interval := range []time.Duration{time.Second, 15 * time.Second} {
		b.Run("scrape="+interval.String(), func(b *testing.B) {
			for b.Loop() {
				var results []result
				for i := range runs {
					r := f.run(b, interval, warmup, window)
					b.Logf("run %d/%d at %v: %s", i+1, runs, interval, r)
					results = append(results, r)
				}
				report(b, interval, warmup, window, results)
			}
		})
	}
	b.Run("counts", func(b *testing.B) {
		for b.Loop() {
			f.counts(b)
		}
	})
}

// setup makes the fixture: control plane, pods, cgroups and their work,
// binaries, leader stream, tokens.
func setup(b *testing.B) *fixture {
	b.Helper()
	root, mounts := agenttest.Cgroups(b, "kerf-peers")
	cp := controlplane.StartForTest(b)
	cs := cp.Clientset
	ctx := b.Context()
	f := &fixture{cp: cp, agentBin: agenttest.BuildAgent(b), cadvisorBin: build(b, "./test/peers/cadvisor")}
	workload := build(b, "./cmd/kerf-workload")

	_, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: peersNamespace}}, metav1.CreateOptions{})
	require.NoError(b, err)
	for _, sa := range []string{peersAgentSA, peersPromSA} {
		_, err = cs.CoreV1().ServiceAccounts(peersNamespace).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{})
		require.NoError(b, err)
	}
	agentPod := agenttest.AgentPod(b, cs, peersNamespace, "kerf-agent-peers", peersNode, peersAgentSA)
	f.node = agenttest.NewNode(b, cs, peersNode, peersNamespace, root, mounts, peersPods, peersContainers)

	// Prometheus scrapes the agent with a service account token, as it
	// does in a cluster where /metrics is behind TokenReview and
	// SubjectAccessReview: the token is sent whether or not this agent
	// asks for one.
	_, err = cs.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "kerf-peers-metrics"},
		Rules: []rbacv1.PolicyRule{{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}}}}, metav1.CreateOptions{})
	require.NoError(b, err)
	_, err = cs.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "kerf-peers-metrics"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "kerf-peers-metrics"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: peersNamespace, Name: peersPromSA}}}, metav1.CreateOptions{})
	require.NoError(b, err)
	tr, err := cs.CoreV1().ServiceAccounts(peersNamespace).CreateToken(ctx, peersPromSA,
		&authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}, metav1.CreateOptions{})
	require.NoError(b, err)
	f.promScrapeToken = tr.Status.Token
	f.promToken = filepath.Join(b.TempDir(), "prometheus-token")
	require.NoError(b, os.WriteFile(f.promToken, []byte(tr.Status.Token), 0o600))

	cs0 := f.node.Containers
	for _, c := range cs0[:peersThrottled] {
		// Dirs[0] is in the cpu hierarchy, the first of the mounts.
		kerneltest.WriteFile(b, c.Dirs[0], "cpu.cfs_period_us", "100000")
		kerneltest.WriteFile(b, c.Dirs[0], "cpu.cfs_quota_us", "2000")
		f.busy = append(f.busy, agenttest.BusyLoop(b, c.Dirs))
	}
	for _, c := range cs0[peersThrottled : peersThrottled+peersAllocating] {
		agenttest.Run(b, c.Dirs, workload, "--alloc-mib=32", "--listen=")
	}
	for _, c := range cs0[peersThrottled+peersAllocating : peersThrottled+peersAllocating+peersOOM+1] {
		mem := c.Dirs[len(c.Dirs)-1] // the memory hierarchy, the last of the mounts
		kerneltest.WriteFile(b, mem, "memory.limit_in_bytes", strconv.Itoa(32<<20))
	}

	leader := leadertest.Start(b, cp, leadertest.Options{Audience: peersAudience, Namespace: peersNamespace, ServiceAccount: peersAgentSA})
	tokenFile := filepath.Join(b.TempDir(), "token")
	require.NoError(b, os.WriteFile(tokenFile, []byte(streamtest.CreateToken(b, cs, peersNamespace, peersAgentSA, peersAudience, agentPod)), 0o600))
	f.agentArgs = []string{
		"--discovery=apiserver", "--kubeconfig=" + cp.Kubeconfig, "--node-name=" + peersNode,
		"--interval=1s", "--oom-source=auto",
		"--cgroup-driver=cgroupfs", "--kubelet-cgroup-root=" + root, "--cgroup-root=" + root + "/kubepods",
		"--leader-addr=" + leader.Addr, "--leader-ca=" + leader.CAFile, "--token-file=" + tokenFile,
	}
	f.workload = workload
	return f
}

// build builds the main package pkg of this module into a temporary
// directory, as a static binary, and returns its path.
func build(b *testing.B, pkg string) string {
	b.Helper()
	repo, err := kube.RepoRoot()
	require.NoError(b, err)
	out := filepath.Join(b.TempDir(), filepath.Base(pkg))
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", out, pkg)
	cmd.Dir = repo
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	data, err := cmd.CombinedOutput()
	require.NoError(b, err, "go build %s: %s", pkg, data)
	return out
}

// peers are the two processes of a run and the Prometheus scraping them.
type peers struct {
	agent, cadvisor *agenttest.Process
	prom            string // Prometheus' URL
}

// start starts the agent, cadvisor and a Prometheus scraping both every
// interval, and waits until both see every container.
func (f *fixture) start(b *testing.B, interval time.Duration) *peers {
	b.Helper()
	p := &peers{
		agent: agenttest.Start(b, f.agentBin, f.agentArgs, agenttest.Options{Name: "kerf-agent", AddrFlag: "--metrics-addr=", Token: f.promScrapeToken}),
		cadvisor: agenttest.Start(b, f.cadvisorBin, []string{
			"--housekeeping_interval=1s", "--max_housekeeping_interval=1s", "--allow_dynamic_housekeeping=false",
			"--enable_metrics=cpu,memory,oom_event",
			// Only the node's cgroups (and /, which cadvisor always
			// has): the raw factory would take every cgroup of this
			// machine otherwise.
			"--docker_only", "--raw_cgroup_prefix_whitelist=" + f.node.Root + "/",
			"--v=0",
		}, agenttest.Options{Name: "cadvisor", AddrFlag: "--listen="}),
	}
	p.prom = promtest.StartJobs(b, interval,
		promtest.Job{Name: "cadvisor", Target: p.cadvisor.Addr},
		promtest.Job{Name: "kerf-agent", Target: p.agent.Addr, TokenFile: f.promToken})
	n := len(f.node.Containers)
	p.agent.WaitTracked(b, n, time.Minute)
	f.waitCadvisor(b, p.cadvisor, n, time.Minute)
	return p
}

// containerID matches cadvisor's id label of a container's cgroup in the
// cgroupfs layout: <root>/kubepods/<qos>/pod<uid>/<id>.
var containerID = regexp.MustCompile(`id="(/[^"]*/kubepods/[a-z]+/pod[0-9a-f-]+/[0-9a-f]{64})"`)

// waitCadvisor waits until cadvisor's /metrics has the working set of n
// containers of the node.
func (f *fixture) waitCadvisor(b *testing.B, c *agenttest.Process, n int, timeout time.Duration) {
	b.Helper()
	deadline := time.Now().Add(timeout)
	seen := 0
	for time.Now().Before(deadline) {
		resp, err := http.Get(c.MetricsURL)
		if err == nil {
			data, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
			_ = resp.Body.Close()
			ids := map[string]bool{}
			for line := range strings.Lines(string(data)) {
				if strings.HasPrefix(line, "container_memory_working_set_bytes{") {
					if m := containerID.FindStringSubmatch(line); m != nil && strings.HasPrefix(m[1], f.node.Root+"/") {
						ids[m[1]] = true
					}
				}
			}
			if seen = len(ids); seen == n {
				return
			}
		}
		time.Sleep(500 * time.Millisecond)
	}
	b.Fatalf("cadvisor reports %d of the node's %d containers after %v; its log: %s", seen, n, timeout, c.Tail())
}

// result is one run's figures, per process.
type result struct {
	agent, cadvisor figures
}

// figures are one process's figures of a run.
type figures struct {
	cpu            float64 // % of one core over the window
	rss, hwm       float64 // MiB
	anon, file     float64 // MiB of rss: RssAnon, RssFile (the binary's pages)
	scrape         float64 // median scrape_duration_seconds of the window, ms
	samples        float64 // samples per scrape
	failed         float64 // % of the window's scrapes that failed (up == 0: a timeout, at scrape_timeout = the interval)
	cpuT, wallTime time.Duration
}

// String is a run's line in the log.
func (r result) String() string {
	return fmt.Sprintf("agent %.2f%% core, RSS %.1f MiB (anonymous %.1f, peak %.1f), scrape %.2f ms (%v samples, %.0f%% failed); cadvisor %.2f%% core, RSS %.1f MiB (anonymous %.1f, peak %.1f), scrape %.2f ms (%v samples, %.0f%% failed)",
		r.agent.cpu, r.agent.rss, r.agent.anon, r.agent.hwm, r.agent.scrape, r.agent.samples, r.agent.failed,
		r.cadvisor.cpu, r.cadvisor.rss, r.cadvisor.anon, r.cadvisor.hwm, r.cadvisor.scrape, r.cadvisor.samples, r.cadvisor.failed)
}

// run starts both afresh, lets them run for warmup, and measures them over
// window.
func (f *fixture) run(b *testing.B, interval, warmup, window time.Duration) result {
	b.Helper()
	p := f.start(b, interval)
	time.Sleep(warmup)
	a0, c0, t0 := p.agent.CPUTime(b), p.cadvisor.CPUTime(b), time.Now()
	time.Sleep(window)
	a1, c1, wall := p.agent.CPUTime(b), p.cadvisor.CPUTime(b), time.Since(t0)
	end := time.Now()
	w := fmt.Sprintf("%ds", int(window.Seconds()))
	fig := func(proc *agenttest.Process, job string, cpu time.Duration) figures {
		return figures{
			cpu: 100 * cpu.Seconds() / wall.Seconds(), cpuT: cpu, wallTime: wall,
			rss: proc.StatusMiB(b, "VmRSS"), hwm: proc.StatusMiB(b, "VmHWM"),
			anon: proc.StatusMiB(b, "RssAnon"), file: proc.StatusMiB(b, "RssFile"),
			scrape:  1000 * queryOne(b, p.prom, fmt.Sprintf(`quantile_over_time(0.5, scrape_duration_seconds{job=%q}[%s])`, job, w), end),
			samples: queryOne(b, p.prom, fmt.Sprintf(`max_over_time(scrape_samples_scraped{job=%q}[%s])`, job, w), end),
			failed:  100 * (1 - queryOne(b, p.prom, fmt.Sprintf(`avg_over_time(up{job=%q}[%s])`, job, w), end)),
		}
	}
	return result{agent: fig(p.agent, "kerf-agent", a1-a0), cadvisor: fig(p.cadvisor, "cadvisor", c1-c0)}
}

// report logs the runs' table at interval and reports the medians.
func report(b *testing.B, interval, warmup, window time.Duration, rs []result) {
	b.Helper()
	type row struct {
		slug, name, unit string
		get              func(figures) float64
		goal             string
	}
	rows := []row{
		{"cpu-%core", "CPU (user+sys, /proc/<pid>/stat)", "% of a core", func(f figures) float64 { return f.cpu }, "≥ 10×"},
		{"rss-MiB", "RSS at the end (VmRSS)", "MiB", func(f figures) float64 { return f.rss }, "≥ 3×"},
		{"anon-MiB", "of which anonymous (RssAnon)", "MiB", func(f figures) float64 { return f.anon }, ""},
		{"file-MiB", "of which file (RssFile: the binary's pages)", "MiB", func(f figures) float64 { return f.file }, ""},
		{"peak-MiB", "peak RSS (VmHWM)", "MiB", func(f figures) float64 { return f.hwm }, ""},
		{"scrape-ms", "scrape time (scrape_duration_seconds, median)", "ms", func(f figures) float64 { return f.scrape }, ""},
		{"failed-%", "failed scrapes (up == 0; timeout = interval)", "%", func(f figures) float64 { return f.failed }, ""},
		{"samples", "samples per scrape", "", func(f figures) float64 { return f.samples }, ""},
	}
	var t strings.Builder
	fmt.Fprintf(&t, "\n%d runs of %v after %v, scraped every %v (agent --interval=1s, cadvisor --housekeeping_interval=1s); median (min–max)\n\n", len(rs), window, warmup, interval)
	fmt.Fprintf(&t, "| | kerf-agent | cadvisor | cadvisor ÷ agent | goal |\n|---|---|---|---|---|\n")
	for _, r := range rows {
		var as, cs, ratios []float64
		for _, x := range rs {
			a, c := r.get(x.agent), r.get(x.cadvisor)
			as, cs, ratios = append(as, a), append(cs, c), append(ratios, c/a)
		}
		name := r.name
		if r.unit != "" {
			name += ", " + r.unit
		}
		ratio := "—" // no ratio to a zero
		if slices.Min(as) > 0 {
			ratio = spreadX(ratios)
		}
		fmt.Fprintf(&t, "| %s | %s | %s | %s | %s |\n", name, spread(as), spread(cs), ratio, r.goal)
		b.ReportMetric(median(as), "agent-"+r.slug)
		b.ReportMetric(median(cs), "cadvisor-"+r.slug)
	}
	b.Log(t.String())
}

// median returns the median of xs.
func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s) == 0 {
		return math.NaN()
	}
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// spread is "median (min–max)".
func spread(xs []float64) string {
	return fmt.Sprintf("%s (%s–%s)", num(median(xs)), num(slices.Min(xs)), num(slices.Max(xs)))
}

// spreadX is spread of ratios.
func spreadX(xs []float64) string {
	return fmt.Sprintf("%s× (%s–%s)", num(median(xs)), num(slices.Min(xs)), num(slices.Max(xs)))
}

// num prints x with three significant digits.
func num(x float64) string {
	return strconv.FormatFloat(x, 'g', 3, 64)
}

// counts OOM-kills the OOM containers i+1 times each and stops the
// throttled loops, then checks that the agent and cadvisor report, through
// Prometheus, the same throttled periods and OOM kills for every
// container.
func (f *fixture) counts(b *testing.B) {
	b.Helper()
	p := f.start(b, time.Second)
	cs := f.node.Containers
	oomFrom := peersThrottled + peersAllocating
	kills := 0
	for i, c := range cs[oomFrom : oomFrom+peersOOM] {
		for range i + 1 {
			f.oomKill(b, c)
			kills++
			time.Sleep(peersKillPace)
		}
	}
	for _, cmd := range f.busy {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}
	// Both have sampled the frozen counters and Prometheus has scraped
	// them a few times over.
	time.Sleep(6 * time.Second)
	now := time.Now()
	type key struct{ ns, pod, name string }
	byKey := map[key]string{}
	for _, c := range cs {
		byKey[key{c.Namespace, c.Pod, c.Name}] = c.Rel
	}
	agent := func(metric string) map[string]float64 {
		out := map[string]float64{}
		for _, s := range query(b, p.prom, fmt.Sprintf(`%s{job="kerf-agent"}`, metric), now) {
			if rel, ok := byKey[key{s.Metric["namespace"], s.Metric["pod"], s.Metric["container"]}]; ok {
				out[rel] = s.value(b)
			}
		}
		return out
	}
	cadvisor := func(metric string) map[string]float64 {
		out := map[string]float64{}
		for _, s := range query(b, p.prom, fmt.Sprintf(`%s{job="cadvisor",id=~%q}`, metric, regexp.QuoteMeta(f.node.Root)+"/.*"), now) {
			out[s.Metric["id"]] = s.value(b)
		}
		return out
	}
	var t strings.Builder
	fmt.Fprintf(&t, "\nthrottled periods and OOM kills per container, through Prometheus (kerf-agent / cadvisor); containers with neither are counted, not listed\n\n")
	fmt.Fprintf(&t, "| container | throttled periods | OOM kills |\n|---|---|---|\n")
	at, ct := agent("container_cpu_cfs_throttled_periods_total"), cadvisor("container_cpu_cfs_throttled_periods_total")
	ao, co := agent("container_oom_events_total"), cadvisor("container_oom_events_total")
	same, zero, noCFS, totalOOM, cadvisorOOM := 0, 0, 0, 0.0, 0.0
	for _, c := range cs {
		a1, ok1 := at[c.Rel]
		c1, ok2 := ct[c.Rel]
		a2, ok3 := ao[c.Rel]
		c2, ok4 := co[c.Rel]
		if !ok2 {
			// cadvisor exports the CFS series of a container with a
			// quota only (its metrics/prometheus.go: Cpu.Quota != 0);
			// the agent exports every container's.
			noCFS++
		}
		if !ok1 || !ok3 || !ok4 {
			b.Errorf("%s/%s %s (%s): missing series: agent throttled %v, agent OOM %v, cadvisor OOM %v",
				c.Namespace, c.Pod, c.Name, c.Rel, ok1, ok3, ok4)
			continue
		}
		totalOOM, cadvisorOOM = totalOOM+a2, cadvisorOOM+c2
		if a1 != c1 || a2 != c2 {
			b.Errorf("%s/%s %s: the agent reports %v throttled periods and %v OOM kills, cadvisor %v (series: %v) and %v", c.Namespace, c.Pod, c.Name, a1, a2, c1, ok2, c2)
		} else {
			same++
		}
		if a1 == 0 && a2 == 0 && c1 == 0 && c2 == 0 {
			zero++
			continue
		}
		fmt.Fprintf(&t, "| %s/%s | %v / %v | %v / %v |\n", c.Pod, c.Name, a1, c1, a2, c2)
	}
	if totalOOM != float64(kills) || cadvisorOOM != float64(kills) {
		b.Errorf("the agent counts %v OOM kills in all, cadvisor %v; the benchmark made %d", totalOOM, cadvisorOOM, kills)
	}
	fmt.Fprintf(&t, "\n%d of %d containers agree on both counts (%d with zero of both; cadvisor has no CFS series for the %d without a quota, the agent 0 for each); %d OOM kills made, the agent counts %v, cadvisor %v\n",
		same, len(cs), zero, noCFS, kills, totalOOM, cadvisorOOM)
	b.Log(t.String())
	b.ReportMetric(float64(same), "containers-agreeing")

	// A burst, past the kernel's rate limit on OOM reports (the paced
	// kills' window has passed).
	burst := cs[oomFrom+peersOOM]
	start := time.Now()
	for range peersBurst {
		f.oomKill(b, burst)
	}
	took := time.Since(start)
	time.Sleep(6 * time.Second)
	now = time.Now()
	ab, cb := agent("container_oom_events_total")[burst.Rel], cadvisor("container_oom_events_total")[burst.Rel]
	b.Logf("a burst of %d OOM kills in %v in %s/%s: the agent counts %v, cadvisor %v (the kernel reports at most 10 kills per 5 s in its log, cadvisor's only source)",
		peersBurst, took.Round(time.Millisecond), burst.Pod, burst.Name, ab, cb)
	if ab != peersBurst {
		b.Errorf("the agent counts %v of a burst of %d OOM kills", ab, peersBurst)
	}
	b.ReportMetric(ab, "agent-burst-kills")
	b.ReportMetric(cb, "cadvisor-burst-kills")
}

// oomKill runs kerf-workload --alloc-mib=64 in c, whose memory limit is 32
// MiB, and waits until the kernel killed it.
func (f *fixture) oomKill(b *testing.B, c agenttest.Container) {
	b.Helper()
	cmd := agenttest.Run(b, c.Dirs, f.workload, "--alloc-mib=64", "--listen=")
	err := cmd.Wait()
	var ee *exec.ExitError
	require.ErrorAs(b, err, &ee, "kerf-workload --alloc-mib=64 under a 32 MiB limit exited without being killed")
	ws, ok := ee.Sys().(syscall.WaitStatus)
	require.True(b, ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL, "kerf-workload under a 32 MiB limit: %v, not OOM-killed", err)
}

// sample is one series of an instant query's answer.
type sample struct {
	Metric map[string]string `json:"metric"`
	Value  [2]any            `json:"value"`
}

// value is the sample's value.
func (s sample) value(b *testing.B) float64 {
	str, _ := s.Value[1].(string)
	v, err := strconv.ParseFloat(str, 64)
	require.NoError(b, err, "the value of %v", s.Metric)
	return v
}

// query runs the instant query q at t on the Prometheus at prom.
func query(b *testing.B, prom, q string, t time.Time) []sample {
	b.Helper()
	resp, err := http.Get(prom + "/api/v1/query?" + url.Values{"query": {q}, "time": {strconv.FormatFloat(float64(t.UnixMilli())/1000, 'f', 3, 64)}}.Encode())
	require.NoError(b, err, "query %s", q)
	defer func() { _ = resp.Body.Close() }()
	var out struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			Result []sample `json:"result"`
		} `json:"data"`
	}
	require.NoError(b, json.NewDecoder(resp.Body).Decode(&out), "query %s", q)
	require.Equal(b, "success", out.Status, "query %s: %s", q, out.Error)
	return out.Data.Result
}

// queryOne runs q, which must answer one series, and returns its value.
func queryOne(b *testing.B, prom, q string, t time.Time) float64 {
	b.Helper()
	r := query(b, prom, q, t)
	require.Len(b, r, 1, "query %s", q)
	return r[0].value(b)
}

// envInt is the integer variable name, or def.
func envInt(b *testing.B, name string, def int) int {
	b.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	require.NoError(b, err, "%s", name)
	require.Positive(b, n, "%s", name)
	return n
}

// envDuration is the duration variable name, or def.
func envDuration(b *testing.B, name string, def time.Duration) time.Duration {
	b.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	require.NoError(b, err, "%s", name)
	require.Positive(b, d, "%s", name)
	return d
}
