package scenario

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/kerf-dev/kerf/internal/images"
	"github.com/kerf-dev/kerf/internal/kube"
	"github.com/kerf-dev/kerf/internal/sandbox"
)

// InstallOptions say where the sandbox lives and what to build.
type InstallOptions struct {
	// RepoRoot is the repository (manifests/, cmd/, bin/).
	RepoRoot string
	// StateDir is the sandbox's state directory.
	StateDir string
	// ImageDir receives the image archives (default <RepoRoot>/bin/images,
	// reused when the binaries did not change).
	ImageDir string
	// Log receives progress.
	Log *slog.Logger
	// Say narrates the steps for people (nil: none).
	Say func(format string, args ...any)
	// VMNode adds the sandbox's second node, a cgroup v2 VM
	// (sandbox.Options.VMNode) that gets the built images too, and makes
	// Install wait for Kerf's agent there as well.
	VMNode bool
}

// Installed is a sandbox running Kerf from manifests/.
type Installed struct {
	// Cluster is the sandbox.
	Cluster *sandbox.Cluster
	// Client reaches it as the administrator, with Kerf's API.
	Client client.Client
	// Kubectl is the kubectl binary of `make deps`.
	Kubectl string
	// Hub is the sandbox's kerf-hub, where the leader forwards its
	// actions.
	Hub *Hub
}

// Install builds Kerf's images, brings the sandbox up (or reuses it),
// imports the images and applies manifests/ with `kubectl apply -k`, the
// way a user installs Kerf, then waits for the agent and the leader.
func Install(ctx context.Context, opts InstallOptions) (*Installed, error) {
	say := opts.Say
	if say == nil {
		say = func(string, ...any) {}
	}
	if opts.ImageDir == "" {
		opts.ImageDir = filepath.Join(opts.RepoRoot, "bin", "images")
	}
	step := func(what string) func() {
		say("%s ...", what)
		start := time.Now()
		return func() { say("%s: done in %.1f s", what, time.Since(start).Seconds()) }
	}

	done := step("building images from this checkout (kerf-agent, kerf-leader, kerf-hub, kerf-workload, pause)")
	archives, err := images.Build(ctx, images.Options{RepoRoot: opts.RepoRoot, OutDir: opts.ImageDir, Log: opts.Log})
	if err != nil {
		return nil, fmt.Errorf("build images: %w", err)
	}
	done()
	var pause string
	var others []string
	for _, a := range archives {
		if a.Ref == sandbox.PauseImageRef {
			pause = a.Path
		} else {
			others = append(others, a.Path)
		}
	}

	sb := sandbox.Options{StateDir: opts.StateDir, PauseImage: pause, Log: opts.Log}
	what := "bringing up the one-node cluster (etcd, apiserver, controller-manager, scheduler, containerd, kubelet, kube-proxy) in " + opts.StateDir
	if opts.VMNode {
		sb.VMNode, sb.Images = true, others
		what = "bringing up the two-node cluster (etcd, apiserver, controller-manager, scheduler, containerd, kubelet, kube-proxy; a cgroup v2 VM node with containerd and a kubelet) in " + opts.StateDir
	}
	done = step(what)
	c, err := sandbox.Up(ctx, sb)
	if err != nil {
		return nil, fmt.Errorf("sandbox up (logs in %s/logs): %w", opts.StateDir, err)
	}
	done()

	// Up imported Options.Images into the host node's containerd when it
	// started the sandbox; a reused one gets this checkout's images here
	// (the VM node keeps those of its disk).
	if len(sb.Images) == 0 || c.Reused {
		done = step("importing the images into containerd")
		for _, a := range archives {
			if a.Ref == sandbox.PauseImageRef {
				continue
			}
			if err := c.ImportImage(ctx, a.Path); err != nil {
				return nil, fmt.Errorf("import %s: %w", a.Ref, err)
			}
		}
		done()
	}

	// controller-runtime's client logs through its own global logger.
	if opts.Log != nil {
		ctrllog.SetLogger(logr.FromSlogHandler(opts.Log.Handler()))
	} else {
		ctrllog.SetLogger(logr.Discard())
	}
	cl, err := client.NewWithWatch(c.Config, client.Options{Scheme: kube.Scheme})
	if err != nil {
		return nil, err
	}
	in := &Installed{Cluster: c, Client: cl, Kubectl: filepath.Join(kube.KubernetesDir(filepath.Join(opts.RepoRoot, "bin")), "kubectl")}

	done = step("starting kerf-hub (SQLite) and registering the cluster: kubectl apply -k manifests/hub/, kubectl exec ... kerf-hub clusters add " + HubCluster)
	if in.Hub, err = in.installHub(ctx, opts.RepoRoot, opts.StateDir); err != nil {
		return nil, fmt.Errorf("kerf-hub: %w", err)
	}
	done()

	done = step("installing Kerf: kubectl apply -k manifests/, with the leader forwarding to the hub (manifests/hub/leader-patch)")
	// The CRDs must be established before the default policy is accepted:
	// apply again until everything is.
	var out []byte
	err = Poll(ctx, time.Minute, time.Second, "kubectl apply -k manifests/", func(ctx context.Context) (bool, error) {
		out, err = in.Run(ctx, "apply", "--server-side", "--force-conflicts", "-k", filepath.Join(opts.RepoRoot, "internal", "scenario", "manifests", "kerf"))
		return err == nil, err
	})
	if err != nil {
		return nil, fmt.Errorf("%w\n%s", err, out)
	}
	done()

	// The one node's agent, or each node's.
	agentNodes, timeout := []string{""}, 3*time.Minute
	if c.VMNode != "" {
		agentNodes = []string{c.NodeName, c.VMNode}
		timeout += sandbox.VMNodeTimeout
	}
	done = step("waiting for the agent and the elected leader")
	env := &Env{Client: cl}
	if err := Poll(ctx, timeout, 250*time.Millisecond, "a running kerf-agent on each node and a ready (elected) kerf-leader", func(ctx context.Context) (bool, error) {
		for _, node := range agentNodes {
			agent, err := env.AgentPod(ctx, node)
			if err != nil || !podReady(agent.Status.Conditions) {
				return false, err
			}
		}
		if _, err := env.LeaderPod(ctx); err != nil {
			return false, err
		}
		// The agent streams to the leader once it found it.
		for _, node := range agentNodes {
			m, err := env.AgentMetricsOn(ctx, node)
			if err != nil {
				return false, err
			}
			if Sum(m, "kerf_agent_stream_state", map[string]string{"state": "connected"}) != 1 {
				return false, nil
			}
		}
		return true, nil
	}); err != nil {
		describe, _ := in.Run(ctx, "-n", KerfNamespace, "get", "pods,events", "-o", "wide")
		return nil, fmt.Errorf("%w\n%s\n(logs: kubectl -n %s logs; node logs in %s/logs)", err, describe, KerfNamespace, opts.StateDir)
	}
	done()
	return in, nil
}

// Run runs kubectl against the sandbox and returns its combined output.
func (in *Installed) Run(ctx context.Context, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, in.Kubectl, append([]string{"--kubeconfig", in.Cluster.Kubeconfig}, args...)...)
	var b bytes.Buffer
	cmd.Stdout, cmd.Stderr = &b, &b
	err := cmd.Run()
	if err != nil {
		err = fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(b.String()))
	}
	return b.Bytes(), err
}

// Logs returns the logs of a Kerf component's pods (kubectl logs), for
// failure messages.
// component is agent or leader.
func (in *Installed) Logs(ctx context.Context, component string) string {
	out, _ := in.Run(ctx, "-n", KerfNamespace, "logs", "--tail=60", "--prefix", "-l", "app.kubernetes.io/component="+component)
	return string(out)
}

// Restarts says, for failure messages, why Kerf's containers last
// stopped (their last state, with the previous instance's last log lines)
// and lists the Warning events in Kerf's namespace: a probe that failed, a
// container the kernel killed. Empty when no container restarted and
// nothing warned.
func (in *Installed) Restarts(ctx context.Context) string {
	var b strings.Builder
	var pods corev1.PodList
	if err := in.Client.List(ctx, &pods, client.InNamespace(KerfNamespace)); err != nil {
		return fmt.Sprintf("list Kerf's pods: %v", err)
	}
	for _, p := range pods.Items {
		for _, cs := range p.Status.ContainerStatuses {
			last := cs.LastTerminationState.Terminated
			if cs.RestartCount == 0 || last == nil {
				continue
			}
			fmt.Fprintf(&b, "%s/%s on %s: %d restarts, last %s after running from %s; its last lines:\n",
				p.Name, cs.Name, p.Spec.NodeName, cs.RestartCount, stopped(last), last.StartedAt.Format(time.RFC3339))
			out, _ := in.Run(ctx, "-n", KerfNamespace, "logs", "--previous", "--tail=15", p.Name, "-c", cs.Name)
			b.Write(out)
		}
	}
	out, _ := in.Run(ctx, "-n", KerfNamespace, "get", "events", "--field-selector", "type=Warning", "--sort-by", ".lastTimestamp")
	if !strings.HasPrefix(string(out), "No resources found") {
		b.Write(out)
	}
	return b.String()
}

func podReady(conds []corev1.PodCondition) bool {
	for _, c := range conds {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
