package main

// The agent's budget (docs/design.md sections 5 and 10: ≤ 30 MiB RSS and
// ≤ 1% of one core at a 1 s interval with 110 pods / 330 containers),
// measured on the real kerf-agent binary: built as hack/build.sh builds it,
// run as a child process against 330 real v1 cgroups where the kubelet's
// cgroupfs driver puts them, pods on a real apiserver and a real leader
// stream, and measured from /proc/<pid>.

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/kerf-dev/kerf/cgroup"
	"github.com/kerf-dev/kerf/internal/kube"
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
// --usage-interval=1s at the 15 s scrape: usage read on every pass. Each
// sub-benchmark starts a fresh agent. Extra agent environment:
// KERF_BUDGET_AGENT_ENV.
func BenchmarkAgentProcessBudget330(b *testing.B) {
	root, mounts := budgetCgroups(b)
	cp := controlplane.StartForTest(b)
	bin := buildAgent(b)
	cs := cp.Clientset
	ctx := b.Context()

	_, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: budgetNamespace}}, metav1.CreateOptions{})
	require.NoError(b, err)
	_, err = cs.CoreV1().ServiceAccounts(budgetNamespace).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: budgetAgentSA}}, metav1.CreateOptions{})
	require.NoError(b, err)
	agentPod := streamtest.CreatePod(b, cs, budgetNamespace, "kerf-agent-budget", budgetNode, budgetAgentSA)

	layout := cgroup.Layout{Driver: cgroup.DriverCgroupfs, Root: root}
	var dirs [][]string // per container, its directory in each of mounts
	for i := range budgetPods {
		p := budgetPod(b, cs, i)
		for _, st := range p.Status.ContainerStatuses {
			rel, err := layout.ContainerDir(cgroup.PodCgroup{UID: string(p.UID), QoS: cgroup.QoSClass(p.Status.QOSClass)}, st.ContainerID)
			require.NoError(b, err)
			var ds []string
			for _, m := range mounts {
				ds = append(ds, kerneltest.MakeCgroupPath(b, m.Path, rel))
			}
			dirs = append(dirs, ds)
		}
	}
	require.Len(b, dirs, budgetPods*budgetContainers)
	for _, ds := range dirs[:budgetBusy] {
		// ds[0] is in the cpu hierarchy, the first of mounts.
		kerneltest.WriteFile(b, ds[0], "cpu.cfs_period_us", "100000")
		kerneltest.WriteFile(b, ds[0], "cpu.cfs_quota_us", "2000")
		busyLoop(b, ds)
	}

	leader := leadertest.Start(b, cp, leadertest.Options{Audience: budgetAudience, Namespace: budgetNamespace, ServiceAccount: budgetAgentSA})
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
	// pass, the cost the default avoids.
	for _, run := range []struct {
		scrape time.Duration
		usage  string
	}{{15 * time.Second, ""}, {time.Second, ""}, {15 * time.Second, "1s"}} {
		scrape, name, args := run.scrape, "scrape="+run.scrape.String(), args
		if run.usage != "" {
			name += "/usage-interval=" + run.usage
			args = append(args[:len(args):len(args)], "--usage-interval="+run.usage)
		}
		b.Run(name, func(b *testing.B) {
			a := startAgent(b, bin, args, scraper.Token)
			a.waitTracked(b, budgetPods*budgetContainers, time.Minute)
			var cpu, wall time.Duration
			for b.Loop() {
				c, w := a.measure(b, scrape, budgetWindow)
				cpu, wall = cpu+c, wall+w
			}
			rss, hwm := a.statusMiB(b, "VmRSS"), a.statusMiB(b, "VmHWM")
			anon, file := a.statusMiB(b, "RssAnon"), a.statusMiB(b, "RssFile")
			b.ReportMetric(100*cpu.Seconds()/wall.Seconds(), "%core")
			b.ReportMetric(rss, "MiB-RSS")
			b.ReportMetric(hwm, "MiB-maxRSS")
			m := a.metrics(b)
			b.Logf("agent pid %d, %s: %.3f%% of a core (%v CPU in %v), VmRSS %.1f MiB (anonymous %.1f, file %.1f: the binary's pages), VmHWM %.1f MiB; Go heap in use %.1f MiB, stacks %.1f MiB, runtime total %.1f MiB, GOGC=%s GOMEMLIMIT=%s",
				a.cmd.Process.Pid, name, 100*cpu.Seconds()/wall.Seconds(), cpu, wall.Round(time.Millisecond), rss, anon, file, hwm,
				m["go_memstats_heap_inuse_bytes"]/(1<<20), m["go_memstats_stack_inuse_bytes"]/(1<<20), m["go_memstats_sys_bytes"]/(1<<20),
				envOr("GOGC", fmt.Sprintf("%d (the agent's default)", defaultGCPercent)), envOr("GOMEMLIMIT", "none"))
		})
	}
}

// budgetCgroups checks this machine can hold the benchmark's cgroups (root,
// v1 cpu, cpuacct and memory controllers) or skips, and returns the
// kubelet --cgroup-root it uses (of its own, so a kubelet on this machine
// is left alone) and the mounts it makes cgroups in, the cpu one first.
func budgetCgroups(b *testing.B) (string, []cgroup.Mount) {
	b.Helper()
	var mounts []cgroup.Mount
	seen := map[string]bool{}
	for _, ctrl := range []string{"cpu", "cpuacct", "memory"} {
		_, m := kerneltest.V1Controller(b, ctrl)
		if !seen[m.Path] { // cpu,cpuacct may share a mount
			seen[m.Path] = true
			mounts = append(mounts, m)
		}
	}
	return fmt.Sprintf("/kerf-budget-%08x", mrand.Uint32()), mounts
}

// busyLoop runs a shell busy loop in the cgroups ds (one per hierarchy);
// the benchmark's cleanup kills it.
func busyLoop(b *testing.B, ds []string) {
	b.Helper()
	cmd := exec.Command("/bin/sh", "-c", "while :; do :; done")
	require.NoError(b, cmd.Start())
	b.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	for _, d := range ds {
		kerneltest.WriteFile(b, d, "cgroup.procs", strconv.Itoa(cmd.Process.Pid))
	}
}

// budgetPod creates pod i of the node as a Deployment's pod looks: labels,
// an owner, three containers with requests (Burstable), ports, env,
// probes and a mount each, and gives it the status of three running
// containers with fresh containerd ids.
func budgetPod(b *testing.B, cs kubernetes.Interface, i int) *corev1.Pod {
	b.Helper()
	ctx := b.Context()
	app := fmt.Sprintf("app-%03d", i)
	var containers []corev1.Container
	for c := range budgetContainers {
		containers = append(containers, corev1.Container{
			Name:  fmt.Sprintf("c%d", c),
			Image: fmt.Sprintf("registry.example.com/team/%s-c%d:1.2.3", app, c),
			Args:  []string{"--listen=:8080", "--log-level=info"},
			Ports: []corev1.ContainerPort{{Name: fmt.Sprintf("http-%d", c), ContainerPort: int32(8080 + c), Protocol: corev1.ProtocolTCP}},
			Env: []corev1.EnvVar{{Name: "APP", Value: app}, {Name: "REGION", Value: "eu-west-1"},
				{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}}},
			Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("50m"), corev1.ResourceMemory: resource.MustParse("64Mi")},
				Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("256Mi")},
			},
			ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromInt32(int32(8080 + c))}},
				PeriodSeconds: 10},
			VolumeMounts: []corev1.VolumeMount{{Name: "config", MountPath: "/etc/app"}},
		})
	}
	p, err := cs.CoreV1().Pods(budgetNamespace).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: budgetNamespace, Name: fmt.Sprintf("%s-7d9f8c6b5-%05d", app, i),
			Labels:          map[string]string{"app.kubernetes.io/name": app, "app.kubernetes.io/part-of": "shop", "pod-template-hash": "7d9f8c6b5"},
			Annotations:     map[string]string{"prometheus.io/scrape": "true", "prometheus.io/port": "8080"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: app + "-7d9f8c6b5", UID: "0d5bd7d4-3c1e-4f7a-9b6e-6f1f2b3c4d5e", Controller: ptr.To(true)}},
		},
		Spec: corev1.PodSpec{
			NodeName:                     budgetNode,
			AutomountServiceAccountToken: ptr.To(false),
			Containers:                   containers,
			Volumes: []corev1.Volume{{Name: "config", VolumeSource: corev1.VolumeSource{
				ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: app + "-config"}}}}},
		},
	}, metav1.CreateOptions{})
	require.NoError(b, err)
	require.Equal(b, corev1.PodQOSBurstable, p.Status.QOSClass)
	started := metav1.Now()
	p.Status.Phase = corev1.PodRunning
	p.Status.HostIP, p.Status.PodIP = "10.0.0.10", fmt.Sprintf("10.244.%d.%d", i/250, i%250+2)
	p.Status.StartTime = &started
	for _, t := range []corev1.PodConditionType{corev1.PodScheduled, corev1.PodInitialized, corev1.ContainersReady, corev1.PodReady} {
		p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: t, Status: corev1.ConditionTrue, LastTransitionTime: started})
	}
	for _, c := range containers {
		id := make([]byte, 32)
		_, _ = rand.Read(id)
		p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, corev1.ContainerStatus{
			Name: c.Name, Image: c.Image, ImageID: c.Image + "@sha256:" + hex.EncodeToString(id),
			ContainerID: "containerd://" + hex.EncodeToString(id),
			Ready:       true, Started: ptr.To(true),
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: started}},
		})
	}
	p, err = cs.CoreV1().Pods(budgetNamespace).UpdateStatus(ctx, p, metav1.UpdateOptions{})
	require.NoError(b, err)
	return p
}

// buildAgent builds kerf-agent with hack/build.sh, as its image has it,
// into a temporary directory and returns its path.
func buildAgent(b *testing.B) string {
	b.Helper()
	repo, err := kube.RepoRoot()
	require.NoError(b, err)
	dir := b.TempDir()
	cmd := exec.Command(filepath.Join(repo, "hack", "build.sh"), dir, "kerf-agent")
	cmd.Dir = repo
	cmd.Env = os.Environ()
	if os.Getenv(budgetProfile) != "" {
		cmd.Env = append(cmd.Env, "KERF_BUILD_TAGS=kerfpprof")
	}
	out, err := cmd.CombinedOutput()
	require.NoError(b, err, "hack/build.sh kerf-agent: %s", out)
	return filepath.Join(dir, "kerf-agent")
}

// agentProcess is a running kerf-agent child.
type agentProcess struct {
	cmd        *exec.Cmd
	metricsURL string // its /metrics
	token      string // a token allowed to get /metrics (the agent reviews it)
	client     *http.Client
	logFile    string
	pprof      string        // its /debug/pprof/ URL, "" without KERF_BUDGET_PROFILE
	exited     chan struct{} // closed once it exited, with waitErr set
	waitErr    error
}

// startAgent starts bin with args, its /metrics on a free loopback port;
// it is stopped (SIGTERM, then SIGKILL after 10 s) when b ends.
func startAgent(b *testing.B, bin string, args []string, token string) *agentProcess {
	b.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(b, err)
	addr := ln.Addr().String()
	require.NoError(b, ln.Close())
	a := &agentProcess{metricsURL: "http://" + addr + "/metrics", token: token, client: &http.Client{Timeout: 10 * time.Second},
		logFile: filepath.Join(b.TempDir(), "kerf-agent.log"), exited: make(chan struct{})}
	logs, err := os.Create(a.logFile)
	require.NoError(b, err)
	a.cmd = exec.Command(bin, append(args, "--metrics-addr="+addr)...)
	a.cmd.Stdout, a.cmd.Stderr = logs, logs
	a.cmd.Env = append(os.Environ(), strings.Fields(os.Getenv(budgetEnv))...)
	if os.Getenv(budgetProfile) != "" {
		pl, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(b, err)
		a.pprof = "http://" + pl.Addr().String() + "/debug/pprof/"
		require.NoError(b, pl.Close())
		a.cmd.Env = append(a.cmd.Env, "KERF_AGENT_PPROF_ADDR="+pl.Addr().String())
	}
	require.NoError(b, a.cmd.Start())
	go func() {
		a.waitErr = a.cmd.Wait()
		_ = logs.Close()
		close(a.exited)
	}()
	b.Cleanup(func() {
		_ = a.cmd.Process.Signal(os.Interrupt)
		select {
		case <-a.exited:
			if a.waitErr != nil {
				b.Errorf("kerf-agent exited with %v; its log: %s", a.waitErr, a.tail())
			}
		case <-time.After(10 * time.Second):
			_ = a.cmd.Process.Kill()
			<-a.exited
			b.Errorf("kerf-agent did not stop within 10 s of SIGINT; its log: %s", a.tail())
		}
	})
	return a
}

// tail returns the end of the agent's log.
func (a *agentProcess) tail() string {
	data, _ := os.ReadFile(a.logFile)
	if len(data) > 4000 {
		data = data[len(data)-4000:]
	}
	return string(data)
}

// waitTracked waits until the agent's /metrics shows n tracked containers.
func (a *agentProcess) waitTracked(b *testing.B, n int, timeout time.Duration) {
	b.Helper()
	deadline := time.Now().Add(timeout)
	var last float64
	for time.Now().Before(deadline) {
		select {
		case <-a.exited:
			b.Fatalf("kerf-agent exited (%v): %s", a.waitErr, a.tail())
		default:
		}
		if m, err := a.scrape(); err == nil {
			if last = m["kerf_agent_tracked_containers"]; int(last) == n {
				return
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	b.Fatalf("kerf-agent tracks %v containers after %v, not %d; its log: %s", last, timeout, n, a.tail())
}

// measure scrapes the agent every scrape for window and returns the CPU
// time the agent used and the wall time it was measured over.
func (a *agentProcess) measure(b *testing.B, scrape, window time.Duration) (cpu, wall time.Duration) {
	b.Helper()
	cpu0, wall0 := a.cpuTime(b), time.Now()
	profiled := make(chan struct{})
	if a.pprof != "" {
		go func() {
			defer close(profiled)
			a.saveProfile(b, fmt.Sprintf("profile?seconds=%d", int(window.Seconds())-5), fmt.Sprintf("cpu-scrape%v.pprof", scrape))
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
			if _, err := a.scrape(); err != nil {
				b.Fatalf("scrape the agent: %v", err)
			}
		case <-end:
			cpu, wall = a.cpuTime(b)-cpu0, time.Since(wall0)
			if a.pprof != "" {
				a.saveProfile(b, "heap", fmt.Sprintf("heap-scrape%v.pprof", scrape))
			}
			return cpu, wall
		}
	}
}

// saveProfile saves the agent's pprof profile at path (under
// /debug/pprof/) as name in KERF_BUDGET_PROFILE's directory.
func (a *agentProcess) saveProfile(b *testing.B, path, name string) {
	resp, err := http.Get(a.pprof + path)
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

// metrics scrapes the agent and fails b when it cannot.
func (a *agentProcess) metrics(b *testing.B) map[string]float64 {
	b.Helper()
	m, err := a.scrape()
	require.NoError(b, err, "scrape the agent")
	return m
}

// scrape gets /metrics as Prometheus asks for it (text, gzip) and returns
// its unlabelled samples by name.
func (a *agentProcess) scrape() (map[string]float64, error) {
	req, err := http.NewRequest(http.MethodGet, a.metricsURL, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/openmetrics-text;version=1.0.0;q=0.5,text/plain;version=0.0.4;q=0.2,*/*;q=0.1")
	req.Header.Set("Authorization", "Bearer "+a.token)
	resp, err := a.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", a.metricsURL, resp.Status)
	}
	m := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		name, value, ok := strings.Cut(sc.Text(), " ")
		if !ok || strings.HasPrefix(name, "#") || strings.Contains(name, "{") {
			continue
		}
		if v, err := strconv.ParseFloat(strings.Fields(value)[0], 64); err == nil {
			m[name] = v
		}
	}
	return m, sc.Err()
}

// cpuTime returns the agent's user plus system CPU time from
// /proc/<pid>/stat (utime and stime, fields 14 and 15, in clock ticks of
// 1/100 s: USER_HZ is 100 on Linux).
func (a *agentProcess) cpuTime(b *testing.B) time.Duration {
	b.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", a.cmd.Process.Pid))
	require.NoError(b, err)
	// Fields after the command name, which is in parentheses and may hold
	// spaces: the third of them is field 3 (state).
	rest := string(data[strings.LastIndexByte(string(data), ')')+2:])
	f := strings.Fields(rest)
	require.Greater(b, len(f), 12, "/proc/<pid>/stat: %s", data)
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	require.NoError(b, err1, "utime in /proc/<pid>/stat")
	require.NoError(b, err2, "stime in /proc/<pid>/stat")
	return time.Duration(utime+stime) * 10 * time.Millisecond
}

// statusMiB returns a kB field of the agent's /proc/<pid>/status in MiB.
func (a *agentProcess) statusMiB(b *testing.B, field string) float64 {
	b.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", a.cmd.Process.Pid))
	require.NoError(b, err)
	for line := range strings.Lines(string(data)) {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			require.NoError(b, err, "%s in /proc/<pid>/status", field)
			return kb / 1024
		}
	}
	b.Fatalf("no %s in /proc/<pid>/status", field)
	return 0
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
