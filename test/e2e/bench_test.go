package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/cgroup"
	"github.com/kerf-dev/kerf/internal/scenario"
)

// benchKills is how many OOM kills each path measures.
const benchKills = 20

// BenchmarkOOMKillToRollback measures, on the real cluster, the time from
// the kernel's OOM kill to
//   - decided: the recommendation reads RolledBack (the leader's first
//     write of the rollback),
//   - request: the pod's spec carries the old memory limit again (the
//     pods/resize request reached the apiserver), and
//   - restored: the kernel enforces the old limit in the pod's cgroup,
//
// over benchKills kills on each path:
//   - agent: the host's cgroup v1 node with the agent's OOM source on
//     (auto: BPF); the kill's time is the BPF event's own kernel timestamp,
//     from a tracer this benchmark runs on the host;
//   - kubelet: the same with --oom-source=off, where the leader learns of
//     the kill from pod status only: the kubelet's path, the baseline;
//   - agent-v2: the VM node (cgroup v2, emulated by TCG) with the agent's
//     OOM source on; no tracer on the host sees its kernel, so the kill's
//     time is when the guest kernel's "Killed process" line reached the
//     host on the VM's serial console (scenario.ConsoleKills), and
//     restored is read through the workload's GET /limits.
//
// It also reports, per path, the CPU (averaged over the path's kills) and
// RSS of the agent on the node of the kills: the VM's are TCG's, compare
// the ratio between the nodes, not the absolute figures. KERF_BENCH_PATH=agent|kubelet|agent-v2 runs one path.
// Run it with make bench-e2e.
func BenchmarkOOMKillToRollback(b *testing.B) {
	in := cluster(b)
	ctx := b.Context()
	kills, err := scenario.NewKillLog()
	if err != nil {
		b.Fatalf("the benchmark times kills with its own BPF tracer: %v", err)
	}
	defer kills.Close()
	var console *scenario.ConsoleKills
	if in.Cluster.VMNode != "" {
		if console, err = in.VMConsole(); err != nil {
			b.Fatal(err)
		}
		defer console.Close()
	}

	paths := []struct{ name, source, node string }{{"agent", "auto", ""}, {"kubelet", "off", ""}, {"agent-v2", "auto", in.Cluster.VMNode}}
	for _, path := range paths {
		if only := os.Getenv("KERF_BENCH_PATH"); only != "" && only != path.name {
			continue
		}
		if path.name == "agent-v2" && path.node == "" {
			b.Logf("agent-v2: the sandbox has no VM node, skipped")
			continue
		}
		if err := setAgentOOMSource(ctx, in, path.source); err != nil {
			b.Fatal(err)
		}
		e := benchEnv(b, in, "bench-"+path.name)
		e.Node = path.node
		node := path.node
		if node == "" {
			node = in.Cluster.NodeName
		}
		usage := agentUsage(ctx, b, in, node)
		clock := killClock(func(ctx context.Context, memcg uint64, _ time.Time) (time.Time, error) {
			ev, err := kills.Wait(ctx, memcg)
			return ev.Time(), err
		})
		if path.node != "" {
			clock = func(ctx context.Context, _ uint64, since time.Time) (time.Time, error) {
				k, err := console.Wait(ctx, since, "kerf-workload")
				return k.Seen, err
			}
		}
		var decided, request, restored []time.Duration
		for i := range benchKills {
			name := fmt.Sprintf("kill-%02d", i)
			m, err := oneKill(ctx, e, clock, name)
			if err != nil {
				rsr, _ := e.RSR(ctx, name)
				b.Logf("recommendation status: %+v", rsr.Status)
				pods, _ := in.Run(ctx, "-n", e.Namespace, "get", "pods", "-o", "yaml")
				b.Logf("pods:\n%s", pods)
				b.Logf("leader logs:\n%s", in.Logs(ctx, "leader"))
				b.Fatalf("%s path, kill %d: %v", path.name, i, err)
			}
			decided, request, restored = append(decided, m[0]), append(request, m[1]), append(restored, m[2])
			if rsr, err := e.RSR(ctx, name); err == nil && rsr.Status.Breach != nil {
				b.Logf("%s %s: decided %6.1f ms, request %6.1f ms, restored %6.1f ms: %s", path.name, name,
					m[0].Seconds()*1000, m[1].Seconds()*1000, m[2].Seconds()*1000, strings.Join(rsr.Status.Breach.Figures, "; "))
			}
		}
		for _, s := range []struct {
			what string
			d    []time.Duration
		}{{"decided", decided}, {"request", request}, {"restored", restored}} {
			p50, p99 := percentile(s.d, 50), percentile(s.d, 99)
			b.ReportMetric(p50.Seconds()*1000, path.name+"-"+s.what+"-p50-ms")
			b.ReportMetric(p99.Seconds()*1000, path.name+"-"+s.what+"-p99-ms")
			b.Logf("%-8s kill → %-8s n=%d p50 %7.1f ms  p99 %7.1f ms  max %7.1f ms", path.name, s.what, len(s.d),
				p50.Seconds()*1000, p99.Seconds()*1000, slices.Max(s.d).Seconds()*1000)
		}
		usage(b, path.name)
	}
	if err := setAgentOOMSource(ctx, in, "auto"); err != nil {
		b.Fatal(err)
	}
}

// killClock returns when the kernel killed in the memory cgroup memcg (a
// host cgroup's inode) or, on the VM node, the first kill since.
type killClock func(ctx context.Context, memcg uint64, since time.Time) (time.Time, error)

// agentUsage reads the CPU seconds of the agent on node now; the function
// it returns reads them again and reports that agent's average CPU over
// the interval and its RSS, labelled with the path.
func agentUsage(ctx context.Context, b *testing.B, in *scenario.Installed, node string) func(b *testing.B, path string) {
	e := &scenario.Env{Client: in.Client}
	type sample struct {
		pod      string
		cpu, rss float64
		at       time.Time
	}
	read := func() sample {
		p, err := e.AgentPod(ctx, node)
		if err != nil {
			b.Fatalf("the agent on %s: %v", node, err)
		}
		m, err := e.AgentMetricsOn(ctx, node)
		if err != nil {
			b.Fatalf("the agent on %s: %v", node, err)
		}
		return sample{pod: p.Name, cpu: scenario.Sum(m, "process_cpu_seconds_total", nil),
			rss: scenario.Sum(m, "process_resident_memory_bytes", nil), at: time.Now()}
	}
	first := read()
	return func(b *testing.B, path string) {
		last := read()
		if last.pod != first.pod {
			b.Fatalf("the agent on %s restarted during the %s path (%s, then %s)", node, path, first.pod, last.pod)
		}
		cores := (last.cpu - first.cpu) / last.at.Sub(first.at).Seconds()
		b.ReportMetric(cores*1000, path+"-agent-cpu-millicores")
		b.ReportMetric(last.rss/(1<<20), path+"-agent-rss-MiB")
		b.Logf("%-8s the agent on %s: %.1f millicores over %.0f s of kills, RSS %.1f MiB", path, node, cores*1000, last.at.Sub(first.at).Seconds(), last.rss/(1<<20))
	}
}

func benchEnv(b *testing.B, in *scenario.Installed, ns string) *scenario.Env {
	b.Helper()
	if err := in.Client.Create(b.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		b.Fatal(err)
	}
	e := &scenario.Env{Client: in.Client, Namespace: ns}
	if err := e.EnsurePolicy(b.Context(), scenario.WatchDuration); err != nil {
		b.Fatal(err)
	}
	return e
}

// oneKill deploys a workload, decreases its memory in place, OOM-kills it
// and returns the three latencies from the kill.
func oneKill(ctx context.Context, e *scenario.Env, clock killClock, name string) ([3]time.Duration, error) {
	var out [3]time.Duration
	w := scenario.OOMWorkload
	w.Name = name
	timeout := time.Minute
	if e.Node != "" {
		timeout += scenario.VMNodeGrace
	}
	if _, err := e.Deploy(ctx, w); err != nil {
		return out, err
	}
	if _, err := e.Recommend(ctx, w, v1alpha1.StrategyInPlace, v1alpha1.ContainerResources{
		Limits: &v1alpha1.ResourceValues{Memory: resourceQuantity("96Mi")},
	}, nil); err != nil {
		return out, err
	}
	if _, _, err := e.WaitPhase(ctx, w.Name, v1alpha1.PhaseWatching, "", timeout); err != nil {
		return out, err
	}
	if _, err := e.WaitKernelLimits(ctx, w.Selector(), scenario.Container, 96*scenario.Mi, 0, timeout); err != nil {
		return out, err
	}
	pods, err := e.RunningPods(ctx, w.Selector())
	if err != nil || len(pods) != 1 {
		return out, fmt.Errorf("want one running pod: %v", err)
	}
	pod := pods[0]
	var memcg uint64
	restored := func(ctx context.Context) (time.Time, error) { return kernelRestored(ctx, e, &pod, 256*scenario.Mi) }
	if e.Node == "" {
		dir, err := e.ContainerDir(&pod, scenario.Container, "memory")
		if err != nil {
			return out, err
		}
		if memcg, err = cgroup.CgroupID(dir); err != nil {
			return out, err
		}
		restored = func(ctx context.Context) (time.Time, error) {
			return podCgroupRestored(ctx, filepath.Dir(dir), 256*scenario.Mi)
		}
	}

	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var wg sync.WaitGroup
	var tDecided, tRequest, tRestored time.Time
	var errs [3]error
	wg.Add(3)
	go func() {
		defer wg.Done()
		tDecided, errs[0] = firstSeen(wctx, e, &v1alpha1.RightsizingRecommendationList{}, func(o client.Object) bool {
			r := o.(*v1alpha1.RightsizingRecommendation)
			return r.Name == w.Name && r.Status.Phase == v1alpha1.PhaseRolledBack
		})
	}()
	go func() {
		defer wg.Done()
		tRequest, errs[1] = firstSeen(wctx, e, &corev1.PodList{}, func(o client.Object) bool {
			p := o.(*corev1.Pod)
			return p.UID == pod.UID && p.Spec.Containers[0].Resources.Limits.Memory().Value() == 256*scenario.Mi
		})
	}()
	go func() {
		defer wg.Done()
		tRestored, errs[2] = restored(wctx)
	}()
	time.Sleep(200 * time.Millisecond) // the watches are open
	asked := time.Now()
	if err := e.Control(ctx, &pod, "alloc", "mib=160"); err != nil {
		return out, err
	}
	t0, err := clock(wctx, memcg, asked)
	wg.Wait()
	if err != nil {
		return out, err
	}
	if err := errors.Join(errs[:]...); err != nil {
		return out, err
	}
	out = [3]time.Duration{tDecided.Sub(t0), tRequest.Sub(t0), tRestored.Sub(t0)}
	// The workload is done with: keep the node's pod count low.
	return out, e.Client.Delete(ctx, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: e.Namespace, Name: w.Name}})
}

// kernelRestored asks the pod's workload for its kernel limits (GET
// /limits, scenario.Env.KernelLimits) every 5 ms and returns when memory
// is back at limit; it keeps asking while the container restarts.
func kernelRestored(ctx context.Context, e *scenario.Env, pod *corev1.Pod, limit int64) (time.Time, error) {
	for {
		var p corev1.Pod
		if err := e.Client.Get(ctx, client.ObjectKeyFromObject(pod), &p); err == nil {
			if l, err := e.KernelLimits(ctx, &p, scenario.Container); err == nil && l.MemoryBytes == limit {
				return time.Now(), nil
			}
		}
		select {
		case <-ctx.Done():
			return time.Time{}, fmt.Errorf("pod %s never enforced %d bytes: %w", pod.Name, limit, ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// firstSeen watches list's kind in the namespace and returns when an
// object first satisfied cond, as this process received it.
func firstSeen(ctx context.Context, e *scenario.Env, list client.ObjectList, cond func(client.Object) bool) (time.Time, error) {
	wc, ok := e.Client.(client.WithWatch)
	if !ok {
		return time.Time{}, fmt.Errorf("the client cannot watch")
	}
	w, err := wc.Watch(ctx, list, client.InNamespace(e.Namespace))
	if err != nil {
		return time.Time{}, err
	}
	defer w.Stop()
	for {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				return time.Time{}, fmt.Errorf("watch of %T ended", list)
			}
			at := time.Now()
			if o, ok := ev.Object.(client.Object); ok && cond(o) {
				return at, nil
			}
		case <-ctx.Done():
			return time.Time{}, fmt.Errorf("watching %T: %w", list, ctx.Err())
		}
	}
}

// podCgroupRestored polls the memory cgroups of the pod's containers every
// millisecond and returns when one enforces limit: the container restarted
// after the kill or resized in place, whichever the kubelet did.
func podCgroupRestored(ctx context.Context, podDir string, limit int64) (time.Time, error) {
	want := strconv.FormatInt(limit, 10)
	for {
		entries, _ := os.ReadDir(podDir)
		for _, d := range entries {
			if !d.IsDir() {
				continue
			}
			raw, err := os.ReadFile(filepath.Join(podDir, d.Name(), "memory.limit_in_bytes"))
			if err == nil && strings.TrimSpace(string(raw)) == want {
				return time.Now(), nil
			}
		}
		select {
		case <-ctx.Done():
			return time.Time{}, fmt.Errorf("no container of %s enforces %s bytes: %w", podDir, want, ctx.Err())
		case <-time.After(time.Millisecond):
		}
	}
}

// setAgentOOMSource rolls the agent DaemonSet out with --oom-source and
// waits until the new agent streams to the leader.
func setAgentOOMSource(ctx context.Context, in *scenario.Installed, source string) error {
	var ds appsv1.DaemonSet
	if err := in.Client.Get(ctx, client.ObjectKey{Namespace: scenario.KerfNamespace, Name: "kerf-agent"}, &ds); err != nil {
		return err
	}
	c := &ds.Spec.Template.Spec.Containers[0]
	args := slices.DeleteFunc(slices.Clone(c.Args), func(a string) bool { return strings.HasPrefix(a, "--oom-source=") })
	args = append(args, "--oom-source="+source)
	if slices.Equal(args, c.Args) {
		return nil
	}
	c.Args = args
	if err := in.Client.Update(ctx, &ds); err != nil {
		return err
	}
	e := &scenario.Env{Client: in.Client}
	return scenario.Poll(ctx, 3*time.Minute+scenario.VMNodeGrace, 250*time.Millisecond, "every agent with --oom-source="+source, func(ctx context.Context) (bool, error) {
		pods, err := e.KerfPods(ctx, "kerf-agent")
		if err != nil || len(pods) != len(nodes(in.Cluster)) {
			return false, err
		}
		for _, p := range pods {
			if !slices.Contains(p.Spec.Containers[0].Args, "--oom-source="+source) {
				return false, nil
			}
		}
		for _, node := range nodes(in.Cluster) {
			m, err := e.AgentMetricsOn(ctx, node)
			if err != nil || scenario.Sum(m, "kerf_agent_stream_state", map[string]string{"state": "connected"}) != 1 {
				return false, nil
			}
		}
		return true, nil
	})
}

func percentile(d []time.Duration, p int) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	i := (len(s)*p + 99) / 100
	return s[max(0, min(len(s)-1, i-1))]
}

func resourceQuantity(s string) *resource.Quantity {
	q := resource.MustParse(s)
	return &q
}
