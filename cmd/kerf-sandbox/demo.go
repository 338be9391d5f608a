package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kerf-dev/kerf/internal/kube"
	"github.com/kerf-dev/kerf/internal/sandbox"
	"github.com/kerf-dev/kerf/internal/scenario"
)

// demoNamespace holds the demo's workloads.
const demoNamespace = "kerf-demo"

func runDemo(args []string) int {
	fs := flag.NewFlagSet("kerf-sandbox demo", flag.ContinueOnError)
	stateDir := fs.String("state-dir", sandbox.DefaultStateDir, "directory for all of the sandbox's state (on a real disk, not overlayfs or tmpfs)")
	keep := fs.Bool("keep", false, "leave the sandbox running on exit (kerf-sandbox down removes it)")
	only := fs.String("scenario", "all", "which scenario to run: oom, oom-v2, throttling, restarts, deferred, recommender or all")
	nodes := fs.Int("nodes", 2, "2: the host's cgroup v1 node and a VM node with a cgroup v2 kernel (oom-v2 runs there); 1: the host's only")
	if code := parse(fs, args); code >= 0 {
		return code
	}
	dir, ok := absStateDir(*stateDir)
	if !ok {
		return 2
	}
	switch *only {
	case "all", "oom", "oom-v2", "throttling", "restarts", "deferred", "recommender":
	default:
		fmt.Fprintf(os.Stderr, "--scenario %q: must be oom, oom-v2, throttling, restarts, deferred, recommender or all\n", *only)
		return 2
	}
	if *nodes != 1 && *nodes != 2 {
		fmt.Fprintf(os.Stderr, "--nodes %d: 1, or 2 with the VM node\n", *nodes)
		return 2
	}
	if *nodes == 1 && *only == "oom-v2" {
		fmt.Fprintln(os.Stderr, "--scenario oom-v2 runs on the VM node: --nodes 2")
		return 2
	}
	if *nodes == 2 {
		if err := sandbox.CanRunVMNode(""); err != nil {
			fmt.Fprintf(os.Stderr, "the demo's second node, a VM with a cgroup v2 kernel, cannot run here: %v\n(--nodes 1 runs the demo on this machine's node only)\n", err)
			return 1
		}
	}
	root, err := kube.RepoRoot()
	if err != nil {
		fmt.Fprintf(os.Stderr, "kerf-sandbox demo runs from a checkout of Kerf (it builds the images from it): %v\n", err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	say := func(format string, args ...any) {
		fmt.Printf("%s  "+format+"\n", append([]any{time.Now().Format("15:04:05")}, args...)...)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	teardown := func() int {
		if *keep {
			say("the sandbox keeps running: kerf-sandbox down --state-dir %s removes it", dir)
			return 0
		}
		say("tearing the sandbox down ...")
		if err := sandbox.Down(context.Background(), dir, log); err != nil {
			fmt.Fprintf(os.Stderr, "kerf-sandbox down: %v\n", err)
			return 1
		}
		say("done: nothing of the sandbox is left")
		return 0
	}

	// Tests bring sandboxes up too; one at a time on a machine.
	unlock, err := sandbox.Lock(ctx)
	if err != nil {
		fmt.Fprintf(os.Stderr, "kerf-sandbox demo: %v\n", err)
		return 1
	}
	defer unlock()
	if *nodes == 2 {
		fmt.Println("Kerf demo: a real cluster on this machine (its cgroup v1 node and a cgroup v2 node in a VM), Kerf installed from manifests/ with kerf-hub, six real rollbacks.")
	} else {
		fmt.Println("Kerf demo: a real one-node cluster on this machine, Kerf installed from manifests/ with kerf-hub, five real rollbacks.")
	}
	in, err := scenario.Install(ctx, scenario.InstallOptions{RepoRoot: root, StateDir: dir, Log: log, Say: say, VMNode: *nodes == 2})
	if err != nil {
		fmt.Fprintf(os.Stderr, "\nthe demo could not set up: %v\n", err)
		teardown()
		return 1
	}
	e := &scenario.Env{Client: in.Client, Namespace: demoNamespace, Out: os.Stdout}
	// The demo's own BPF tracer gives the timelines the kernel's time of
	// each OOM kill.
	if kills, err := scenario.NewKillLog(); err != nil {
		say("no BPF tracer for the timelines (%v): they start at what the agent and the kubelet report", err)
	} else {
		defer kills.Close()
		e.Kills = kills
	}
	if err := freshNamespace(ctx, in.Client, demoNamespace); err != nil {
		fmt.Fprintf(os.Stderr, "namespace %s: %v\n", demoNamespace, err)
		teardown()
		return 1
	}

	type step struct {
		key, title, story string
		run               func(context.Context, scenario.Options) (*scenario.Result, error)
	}
	// The same OOM scenario on the VM node, in a namespace of its own.
	v2 := &scenario.Env{Client: in.Client, Namespace: demoNamespace + "-v2", Out: os.Stdout, Node: in.Cluster.VMNode}
	if in.Cluster.VMNode != "" {
		// The VM's console gives its timelines the kernel's time of the kill.
		if console, err := in.VMConsole(); err != nil {
			say("the VM's console is not followed (%v): its timeline starts at what the agent and the kubelet report", err)
		} else {
			defer console.Close()
			v2.Console = console
		}
		if err := freshNamespace(ctx, in.Client, v2.Namespace); err != nil {
			fmt.Fprintf(os.Stderr, "namespace %s: %v\n", v2.Namespace, err)
			teardown()
			return 1
		}
	}
	steps := []step{
		{"oom", "1. A memory decrease that gets OOM-killed (InPlace)",
			"The workload's memory limit goes from 256Mi to 96Mi in place; then it allocates 160 MiB. The kernel OOM-kills it, the agent's BPF tracer sees the kill, the leader puts 256Mi back in place.",
			e.OOM},
		{"oom-v2", "1b. The same, on the cgroup v2 node (InPlace, node " + sandbox.VMNodeName + ")",
			"The node users run: Debian's 6.1 kernel with cgroup v2 in a VM, the kubelet's defaults. The resize writes memory.max; the agent on that node catches the kill with its BPF tracer and reads memory.events; the leader, on the other node, rolls it back. The VM is emulated (TCG), so its pods are slower than the host's.",
			v2.OOM},
		{"throttling", "2. A CPU decrease that throttles (InPlace; the 2-minute, 300-period rule)",
			"The workload burns 400 millicores; its CPU limit goes from 1 to 100m. The kernel throttles it in most periods. The rule waits two minutes after the change, then 300 periods, and rolls the CPU back: about two and a half minutes.",
			e.Throttling},
		{"restarts", "3. A change followed by crash restarts (Rollout)",
			"Both requests change through a rollout, and the HPA target follows. The new pod then crashes three times: every touched resource and the HPA target are rolled back.",
			func(ctx context.Context, o scenario.Options) (*scenario.Result, error) {
				o.HPA = true
				return e.Restarts(ctx, o)
			}},
		{"deferred", "4. A memory decrease for the next pod start that gets OOM-killed (Deferred)",
			"The running pod keeps 256Mi; the demo deletes it and its replacement starts with 96Mi from the webhook, then allocates 160 MiB. The kernel OOM-kills it; the leader stops the webhook's injection and resizes that pod back to 256Mi in place.",
			func(ctx context.Context, o scenario.Options) (*scenario.Result, error) {
				o.Deferred = true
				return e.OOM(ctx, o)
			}},
		{"recommender", "5. Kerf's own recommender: a decrease it makes, an OOM kill, and the memory it then refuses to lower (InPlace)",
			"The workload asks for 500m and 1Gi and uses almost nothing. The recommender (30 s of history in this demo, 24 h by default) recommends less and Kerf applies it in place. The workload then allocates past its new limit: the kernel OOM-kills it, Kerf rolls the memory back, and the recommender from then on refuses to lower it.",
			e.Recommender},
	}
	failed := false
	describe := scenario.OOMWorkload.Name // the first recommendation that rolled back
	ran := false
	for _, s := range steps {
		if *only != "all" && *only != s.key || s.key == "oom-v2" && in.Cluster.VMNode == "" {
			continue
		}
		fmt.Printf("\n== %s\n   %s\n\n", s.title, s.story)
		r, err := s.run(ctx, scenario.Options{})
		if err != nil {
			failed = true
			fmt.Fprintf(os.Stderr, "\n   this scenario failed: %v\n   leader logs: kubectl -n %s logs -l app.kubernetes.io/component=leader; node logs: %s/logs\n", err, scenario.KerfNamespace, dir)
			if errors.Is(err, context.Canceled) {
				break
			}
			continue
		}
		if !ran {
			describe, ran = r.Workload.Name, true
		}
		fmt.Printf("\n   timeline (what the kernel, the agent, the kubelet and the leader saw and did):\n")
		r.Timeline.Print(os.Stdout)
		switch {
		case s.key == "throttling":
			fmt.Printf("   change → recommendation RolledBack: %.0f s (the rule waits 2 minutes, then 300 periods)\n",
				r.RolledBack.Sub(r.Changed).Seconds())
		case !r.Signal.IsZero() && !r.RolledBack.IsZero():
			fmt.Printf("   harm first seen → recommendation RolledBack: %.2f s; → kernel enforcing the old values: %.2f s\n",
				r.RolledBack.Sub(r.Signal).Seconds(), r.KernelRestored.Sub(r.Signal).Seconds())
		}
	}

	// curl reaches the elected leader by its pod's address and checks
	// the certificate for the Service's name.
	leaderHostPort := "<leader pod IP>:9401"
	if u, err := e.LeaderURL(ctx); err == nil {
		leaderHostPort = strings.TrimPrefix(u, "https://")
	}
	proxyURL, err := leaderProxy(ctx, e, log)
	if err != nil {
		proxyURL = "(no local proxy: " + err.Error() + ")"
	}
	fmt.Printf(`
== Look around

  export KUBECONFIG=%s
  alias kubectl=%s
  kubectl get rsr -A
  kubectl -n %s describe rsr %s
  kubectl -n %s describe rsr %s   # the recommender's: its Refused event and refused action say what it held back and why
  kubectl -n %s get events --field-selector type=Warning
  TOKEN=$(kubectl -n kerf-system create token kerf-scenario-reader --audience kerf)   # bound to kerf-metrics-reader and kerf-audit-reader; Kerf's audience only
  kubectl -n kerf-system get configmap kerf-leader-ca -o jsonpath='{.data.ca\.crt}' > kerf-leader-ca.crt   # the leader's HTTPS certificate is for %s
  LEADER="--cacert kerf-leader-ca.crt --connect-to %s:%d:%s https://%s:%d"
  curl -s -H "Authorization: Bearer $TOKEN" $LEADER'/v1/audit?type=rolled_back'   # the audit API (the elected leader)
  curl -s -H "Authorization: Bearer $TOKEN" $LEADER/metrics | grep kerf_actions_total

  The leader's web pages, open them in a browser on this machine (a local proxy of
  this demo adds the reader's token the leader asks for; docs/web.md says what to
  put in front of a real leader):
  %s/ui/activity?namespace=%s       Activity
  %s/ui/workloads/%s/%s    the recommender's workload: timeline, chart, refusals

  kerf-hub, where the leader forwards every action (SQLite, in the sandbox);
  its pages (sign in with the token in %s; the certificate is %s, self-signed):
  %s/ui/fleet    %s/ui/activity
  curl -s --cacert %s -H "Authorization: Bearer $(cat %s)" '%s/v1/audit?type=rolled_back'
  curl -s --cacert %s -H "Authorization: Bearer $(cat %s)" %s/v1/clusters

The cluster stays up until Ctrl-C.
`, in.Cluster.Kubeconfig, in.Kubectl, demoNamespace, describe, demoNamespace, scenario.RecommendWorkload.Name, demoNamespace,
		scenario.LeaderServerName, scenario.LeaderServerName, scenario.LeaderMetricsPort, leaderHostPort, scenario.LeaderServerName, scenario.LeaderMetricsPort, proxyURL, demoNamespace, proxyURL, demoNamespace, scenario.RecommendWorkload.Name,
		in.Hub.ReadTokenFile, in.Hub.CAFile, in.Hub.URL, in.Hub.URL,
		in.Hub.CAFile, in.Hub.ReadTokenFile, in.Hub.URL, in.Hub.CAFile, in.Hub.ReadTokenFile, in.Hub.URL)
	if ctx.Err() == nil {
		<-ctx.Done()
	}
	fmt.Println()
	code := teardown()
	if failed {
		return 1
	}
	return code
}

// freshNamespace deletes what an earlier demo left in ns and creates it
// again.
func freshNamespace(ctx context.Context, c client.Client, ns string) error {
	obj := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}
	if err := c.Delete(ctx, obj); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	return scenario.Poll(ctx, 2*time.Minute, 250*time.Millisecond, "namespace "+ns+" to be recreated", func(ctx context.Context) (bool, error) {
		err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
		if apierrors.IsAlreadyExists(err) {
			return false, nil // still terminating
		}
		return err == nil, err
	})
}
