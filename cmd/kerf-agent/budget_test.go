package main

// The agent's budget (docs/design.md sections 5 and 10: ≤ 30 MiB RSS and
// ≤ 1% of one core at a 1 s interval with 110 pods / 330 containers),
// measured on the real kerf-agent binary: built as hack/build.sh builds it,
// run as a child process against 330 real v1 cgroups where the kubelet's
// cgroupfs driver puts them, pods on a real apiserver and a real leader
// stream, and measured from /proc/<pid>.

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kerf-dev/kerf/test/agenttest"
	"github.com/kerf-dev/kerf/test/authtest"
	"github.com/kerf-dev/kerf/test/controlplane"
	"github.com/kerf-dev/kerf/test/kerneltest"
	"github.com/kerf-dev/kerf/test/leadertest"
	"github.com/kerf-dev/kerf/test/streamtest"
)

const (
	budgetNode      = "kerf-budget-node"
	budgetNamespace = "kerf-budget"
	budgetAgentSA   = "kerf-agent"
	budgetAudience  = "kerf-leader"
	// budgetPods and budgetContainers are the node of design section 5.
	budgetPods       = 110
	budgetContainers = 3
	// budgetBusy containers run a busy loop under a 2 ms / 100 ms CFS
	// quota, so their counters move every period.
	budgetBusy = 5
	// budgetWindow is how long the agent is measured, after it settled.
	budgetWindow = 60 * time.Second
)

// budgetEnv names a variable whose value (space-separated NAME=value
// pairs, e.g. "GOMEMLIMIT=20MiB GOGC=50") is added to the agent's
// environment, to try the settings an operator would put in the
// DaemonSet.
const budgetEnv = "KERF_BUDGET_AGENT_ENV"

// budgetProfile names a variable that, set to a directory, makes the
// benchmark build the agent with -tags kerfpprof (pprof_kerfpprof.go) and
// save a heap profile and a CPU profile of the measured window there (the
// pprof server adds a little to the agent's RSS and CPU).
const budgetProfile = "KERF_BUDGET_PROFILE"

// BenchmarkAgentProcessBudget330 runs the real kerf-agent binary on a node
// of 110 pods × 3 containers = 330 real cgroups (v1 cpu, cpuacct and
// memory, cgroupfs layout under a kubelet --cgroup-root of its own), the
// pods on a real apiserver (--discovery=apiserver), streaming to a real
// leader stream server (TLS, TokenReview) in this process, sampling every
// second with --oom-source=auto. Once its /metrics shows 330 tracked
// containers it measures the child for 60 s while /metrics is scraped every
// 15 s (a typical Prometheus scrape) or every second (the worst case), and
// reports its CPU (utime+stime of /proc/<pid>/stat over wall time, % of
// one core) and its RSS at the end and its peak since start (VmRSS, VmHWM).
// It runs the agent's default --usage-interval (10 s) at both scrapes, and
// --usage-interval=1s at the 15 s scrape: usage read on every pass. The
// /metrics-tls runs serve /metrics as the manifests do (--metrics-tls,
// the certificate the leader stream signs) at both scrapes; the scraper
// verifies it and, like Prometheus, keeps its connection alive (HTTP/2
// over TLS), so one handshake serves the window. Each sub-benchmark
// starts a fresh agent. Extra agent environment: KERF_BUDGET_AGENT_ENV.
func BenchmarkAgentProcessBudget330(b *testing.B) {
	root, mounts := agenttest.Cgroups(b, "kerf-budget")
	cp := controlplane.StartForTest(b)
	var tags []string
	if os.Getenv(budgetProfile) != "" {
		tags = append(tags, "kerfpprof")
	}
	bin := agenttest.BuildAgent(b, tags...)
	cs := cp.Clientset
	ctx := b.Context()

	_, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: budgetNamespace}}, metav1.CreateOptions{})
	require.NoError(b, err)
	_, err = cs.CoreV1().ServiceAccounts(budgetNamespace).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: budgetAgentSA}}, metav1.CreateOptions{})
	require.NoError(b, err)
	agentPod := agenttest.AgentPod(b, cs, budgetNamespace, "kerf-agent-budget", budgetNode, budgetAgentSA)

	n := agenttest.NewNode(b, cs, budgetNode, budgetNamespace, root, mounts, budgetPods, budgetContainers)
	for _, c := range n.Containers[:budgetBusy] {
		// Dirs[0] is in the cpu hierarchy, the first of mounts.
		kerneltest.WriteFile(b, c.Dirs[0], "cpu.cfs_period_us", "100000")
		kerneltest.WriteFile(b, c.Dirs[0], "cpu.cfs_quota_us", "2000")
		agenttest.BusyLoop(b, c.Dirs)
	}

	leader := leadertest.Start(b, cp, leadertest.Options{Audience: budgetAudience, Namespace: budgetNamespace, ServiceAccount: budgetAgentSA,
		IssueMetricsCertificates: true})
	addr, caFile := leader.Addr, leader.CAFile
	tokenFile := filepath.Join(b.TempDir(), "token")
	require.NoError(b, os.WriteFile(tokenFile, []byte(streamtest.CreateToken(b, cs, budgetNamespace, budgetAgentSA, budgetAudience, agentPod)), 0o600))
	// The scrapes authenticate as Prometheus would: a service account
	// bound to kerf-metrics-reader, reviewed by the agent (a TokenReview
	// and a SubjectAccessReview per minute, in the figures).
	authtest.InstallReaderRoles(b, cp)
	scraper := authtest.NewCaller(b, cp, budgetNamespace, "prometheus")
	scraper.BindCluster(b, cp, authtest.MetricsReader)
	args := []string{
		"--discovery=apiserver", "--kubeconfig=" + cp.Kubeconfig, "--node-name=" + budgetNode,
		"--interval=1s", "--oom-source=auto",
		"--cgroup-driver=cgroupfs", "--kubelet-cgroup-root=" + root, "--cgroup-root=" + root + "/kubepods",
		"--leader-addr=" + addr, "--leader-ca=" + caFile, "--token-file=" + tokenFile,
	}
	// The agent's default --usage-interval (10 s), and usage read on every
	// pass, the cost the default avoids; plain HTTP, and HTTPS as shipped.
	for _, run := range []struct {
		scrape time.Duration
		usage  string
		tls    bool
	}{{15 * time.Second, "", false}, {time.Second, "", false}, {15 * time.Second, "1s", false},
		{15 * time.Second, "", true}, {time.Second, "", true}} {
		scrape, name, args := run.scrape, "scrape="+run.scrape.String(), args
		opts := agenttest.Options{Name: "kerf-agent", AddrFlag: "--metrics-addr=", Token: scraper.Token,
			Env: strings.Fields(os.Getenv(budgetEnv)), Pprof: os.Getenv(budgetProfile) != ""}
		if run.usage != "" {
			name += "/usage-interval=" + run.usage
			args = append(args[:len(args):len(args)], "--usage-interval="+run.usage)
		}
		if run.tls {
			name += "/metrics-tls"
			args = append(args[:len(args):len(args)], "--metrics-tls")
			opts.MetricsCA, opts.MetricsServerName = leader.MetricsPool, leader.MetricsServerName
		}
		b.Run(name, func(b *testing.B) {
			a := agenttest.Start(b, bin, args, opts)
			a.WaitTracked(b, budgetPods*budgetContainers, time.Minute)
			var cpu, wall time.Duration
			for b.Loop() {
				c, w := measure(b, a, scrape, budgetWindow)
				cpu, wall = cpu+c, wall+w
			}
			rss, hwm := a.StatusMiB(b, "VmRSS"), a.StatusMiB(b, "VmHWM")
			anon, file := a.StatusMiB(b, "RssAnon"), a.StatusMiB(b, "RssFile")
			b.ReportMetric(100*cpu.Seconds()/wall.Seconds(), "%core")
			b.ReportMetric(rss, "MiB-RSS")
			b.ReportMetric(hwm, "MiB-maxRSS")
			m := a.Metrics(b)
			b.Logf("agent pid %d, %s over %s: %.3f%% of a core (%v CPU in %v), VmRSS %.1f MiB (anonymous %.1f, file %.1f: the binary's pages), VmHWM %.1f MiB; Go heap in use %.1f MiB, stacks %.1f MiB, runtime total %.1f MiB, GOGC=%s GOMEMLIMIT=%s",
				a.Cmd.Process.Pid, name, a.Proto(), 100*cpu.Seconds()/wall.Seconds(), cpu, wall.Round(time.Millisecond), rss, anon, file, hwm,
				m["go_memstats_heap_inuse_bytes"]/(1<<20), m["go_memstats_stack_inuse_bytes"]/(1<<20), m["go_memstats_sys_bytes"]/(1<<20),
				envOr("GOGC", fmt.Sprintf("%d (the agent's default)", defaultGCPercent)), envOr("GOMEMLIMIT", "none"))
		})
	}
}

// measure scrapes the agent every scrape for window and returns the CPU
// time the agent used and the wall time it was measured over.
func measure(b *testing.B, a *agenttest.Process, scrape, window time.Duration) (cpu, wall time.Duration) {
	b.Helper()
	cpu0, wall0 := a.CPUTime(b), time.Now()
	profiled := make(chan struct{})
	if a.PprofURL != "" {
		go func() {
			defer close(profiled)
			saveProfile(b, a, fmt.Sprintf("profile?seconds=%d", int(window.Seconds())-5), profileName(b, "cpu"))
		}()
	} else {
		close(profiled)
	}
	defer func() { <-profiled }()
	t := time.NewTicker(scrape)
	defer t.Stop()
	end := time.After(window)
	for {
		select {
		case <-t.C:
			if _, err := a.Scrape(); err != nil {
				b.Fatalf("scrape the agent: %v", err)
			}
		case <-end:
			cpu, wall = a.CPUTime(b)-cpu0, time.Since(wall0)
			if a.PprofURL != "" {
				saveProfile(b, a, "heap", profileName(b, "heap"))
			}
			return cpu, wall
		}
	}
}

// profileName names the kind of profile of sub-benchmark b, e.g.
// cpu-scrape=15s_metrics-tls.pprof.
func profileName(b *testing.B, kind string) string {
	_, sub, _ := strings.Cut(b.Name(), "/")
	return kind + "-" + strings.ReplaceAll(sub, "/", "_") + ".pprof"
}

// saveProfile saves the agent's pprof profile at path (under
// /debug/pprof/) as name in KERF_BUDGET_PROFILE's directory.
func saveProfile(b *testing.B, a *agenttest.Process, path, name string) {
	resp, err := http.Get(a.PprofURL + path)
	if err != nil {
		b.Errorf("get %s: %v", path, err)
		return
	}
	defer func() { _ = resp.Body.Close() }()
	data, err := io.ReadAll(resp.Body)
	if err == nil {
		err = os.WriteFile(filepath.Join(os.Getenv(budgetProfile), name), data, 0o644)
	}
	if err != nil {
		b.Errorf("save the agent's %s profile: %v", path, err)
	}
}

// envOr returns the value the agent's environment gives name, or def.
func envOr(name, def string) string {
	v := os.Getenv(name)
	for _, kv := range strings.Fields(os.Getenv(budgetEnv)) {
		if k, val, ok := strings.Cut(kv, "="); ok && k == name {
			v = val
		}
	}
	if v == "" {
		return def
	}
	return v
}
