// Package scenario runs Kerf's end-to-end scenarios on a real cluster: a
// workload is changed, made to misbehave for real (OOM kill, CPU throttling,
// crash restarts), and Kerf is expected to roll the change back. `make demo`
// narrates them for people; test/e2e runs them and asserts the end states.
//
// A scenario talks to the cluster through the apiserver, to the workload
// through its HTTP control endpoint on the pod network, to the agent of the
// workload's node and to the leader through their /metrics, and to the
// kernel through the pods' cgroup files on this machine (the host node), or,
// for a pod on the sandbox's VM node (cgroup v2, files not visible here),
// through the workload's own GET /limits. Env.Node pins the workloads to one
// node; TwoNodes spreads one over both.
package scenario

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptrace"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kerf-dev/kerf/cgroup"
	"github.com/kerf-dev/kerf/internal/sandbox"
)

// WorkloadImage is the image of kerf-workload, the program scenarios make
// misbehave (internal/images builds it).
const WorkloadImage = "kerf.local/kerf-workload:dev"

// KerfNamespace is where manifests/ installs Kerf.
const KerfNamespace = "kerf-system"

// Env is what a scenario needs from the cluster.
type Env struct {
	// Client reads and writes the cluster; its scheme knows Kerf's API.
	Client client.Client
	// Namespace is where the scenario creates its workload and policy; it
	// must exist.
	Namespace string
	// CgroupRoot is where this machine mounts cgroup v1 controllers
	// (default /sys/fs/cgroup).
	CgroupRoot string
	// Layout is how the node's kubelet names pod cgroups (default cgroupfs,
	// root /).
	Layout cgroup.Layout
	// Out receives the narration (nil: none).
	Out io.Writer
	// HTTP reaches pods on the pod network (nil: a client with a 5 s
	// timeout).
	HTTP *http.Client
	// Kills, when set, gives the kernel's own time of OOM kills (a BPF
	// tracer on this machine) for the timelines, of pods on this machine
	// only: a kill on the VM node is timed by the agent and the kubelet.
	Kills *KillLog
	// Console, when set, gives the time the VM node's console showed each
	// OOM kill there, for the timelines of pods on the VM node.
	Console *ConsoleKills
	// Node, when set, is the node every workload the scenarios deploy runs
	// on (nodeSelector kubernetes.io/hostname), tolerating the VM node's
	// taint when it is the VM node (label sandbox.VMNodeTaint=true). Empty:
	// wherever the scheduler puts them (on the one-node sandbox, this
	// machine).
	Node string

	mu sync.Mutex
	// nodeMu guards vmNodes, whether each node seen is the VM node.
	nodeMu  sync.Mutex
	vmNodes map[string]bool
	// tokenMu guards the reader's token (ReaderToken).
	tokenMu      sync.Mutex
	token        string
	tokenExpires time.Time
	// tlsMu guards the transports of Kerf's HTTPS endpoints, by server
	// name, and the CA bundle they trust (leaderTransport).
	tlsMu   sync.Mutex
	kerfTLS map[string]*http.Transport
	kerfCA  []byte
}

func (e *Env) cgroupRoot() string {
	if e.CgroupRoot == "" {
		return "/sys/fs/cgroup"
	}
	return e.CgroupRoot
}

func (e *Env) httpClient() *http.Client {
	if e.HTTP == nil {
		return &http.Client{Timeout: 5 * time.Second}
	}
	return e.HTTP
}

// Say narrates one step.
func (e *Env) Say(format string, args ...any) {
	if e.Out == nil {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	fmt.Fprintf(e.Out, "  %s  "+format+"\n", append([]any{time.Now().Format("15:04:05.000")}, args...)...)
}

// Mark is one entry of a scenario's timeline.
type Mark struct {
	// At is when it happened (or was first seen).
	At time.Time
	// Who saw or did it: kernel, agent, kubelet, leader, rule (a time the
	// health watch's rules name) or scenario.
	Who string
	// What happened.
	What string
}

// Timeline is what the kernel, the agent, the kubelet and the leader saw and
// did during a scenario, in time order once sorted.
type Timeline []Mark

// Print writes the timeline relative to its first mark.
func (t Timeline) Print(w io.Writer) {
	if len(t) == 0 {
		return
	}
	sorted := append(Timeline(nil), t...)
	sortMarks(sorted)
	t0 := sorted[0].At
	for _, m := range sorted {
		fmt.Fprintf(w, "    %+9.3fs  %-8s %s\n", m.At.Sub(t0).Seconds(), m.Who, m.What)
	}
}

func sortMarks(t Timeline) {
	for i := 1; i < len(t); i++ {
		for j := i; j > 0 && t[j].At.Before(t[j-1].At); j-- {
			t[j], t[j-1] = t[j-1], t[j]
		}
	}
}

// Poll calls cond every interval until it returns true, returns an error, or
// timeout passes; what names the wait in the error.
func Poll(ctx context.Context, timeout, interval time.Duration, what string, cond func(context.Context) (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last error
	for {
		ok, err := cond(ctx)
		if err != nil {
			last = err
		} else if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			if last != nil {
				return fmt.Errorf("waiting for %s: %w (last error: %v)", what, ctx.Err(), last)
			}
			return fmt.Errorf("waiting for %s: %w", what, ctx.Err())
		case <-time.After(interval):
		}
	}
}

// RunningPods returns the workload's pods (matching sel) that run, are
// ready and are not being deleted.
func (e *Env) RunningPods(ctx context.Context, sel map[string]string) ([]corev1.Pod, error) {
	var list corev1.PodList
	if err := e.Client.List(ctx, &list, client.InNamespace(e.Namespace), client.MatchingLabelsSelector{Selector: labels.SelectorFromSet(sel)}); err != nil {
		return nil, err
	}
	var out []corev1.Pod
	for _, p := range list.Items {
		if p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning && podReady(p.Status.Conditions) {
			out = append(out, p)
		}
	}
	return out, nil
}

// ContainerDir returns the cgroup directory of a pod's container under the
// v1 controller ctrl (cpu, memory), on this machine: for pods on the host
// node only (KernelLimits reads the others through the workload).
func (e *Env) ContainerDir(pod *corev1.Pod, container, ctrl string) (string, error) {
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.Name != container || cs.ContainerID == "" {
			continue
		}
		layout := e.Layout
		if layout.Driver == "" {
			layout.Driver = cgroup.DriverCgroupfs
		}
		rel, err := layout.ContainerDir(cgroup.PodCgroup{UID: string(pod.UID), QoS: cgroup.QoSClass(pod.Status.QOSClass)}, cs.ContainerID)
		if err != nil {
			return "", err
		}
		return filepath.Join(e.cgroupRoot(), ctrl, rel), nil
	}
	return "", fmt.Errorf("pod %s/%s: container %q has no containerID yet", pod.Namespace, pod.Name, container)
}

// PodMemoryLimit reads the memory limit the kernel enforces on a pod's own
// cgroup on this machine (cgroup v1's memory.limit_in_bytes): the
// pod-level limit, where the pod sets one.
func (e *Env) PodMemoryLimit(pod *corev1.Pod) (int64, error) {
	layout := e.Layout
	if layout.Driver == "" {
		layout.Driver = cgroup.DriverCgroupfs
	}
	rel, err := layout.PodDir(cgroup.PodCgroup{UID: string(pod.UID), QoS: cgroup.QoSClass(pod.Status.QOSClass)})
	if err != nil {
		return 0, err
	}
	path := filepath.Join(e.cgroupRoot(), "memory", rel, "memory.limit_in_bytes")
	raw, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	v, err := strconv.ParseInt(strings.TrimSpace(string(raw)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", path, err)
	}
	return v, nil
}

// Limits are a container's limits as the kernel enforces them, from cgroup
// v1 or v2 files: cgroup.Limits, whose JSON kerf-workload's GET /limits
// serves.
type Limits = cgroup.Limits

// cpuRequest says what the CPU request set in the kernel, for the
// narration: cpu.shares on v1, cpu.weight on v2.
func cpuRequest(l Limits) string {
	if l.Version == 2 {
		return fmt.Sprintf("cpu.weight %d", l.CPUWeight)
	}
	return fmt.Sprintf("cpu.shares %d", l.CPUShares)
}

// KernelLimits reads a container's limits as the kernel enforces them:
// from its cgroup files on this machine, or, for a pod on the VM node,
// from the workload's GET /limits (its own cgroup; container must be
// Container, the workload's one).
func (e *Env) KernelLimits(ctx context.Context, pod *corev1.Pod, container string) (Limits, error) {
	vm, err := e.onVMNode(ctx, pod.Spec.NodeName)
	if err != nil {
		return Limits{}, err
	}
	if vm {
		return e.workloadLimits(ctx, pod, container)
	}
	return e.hostLimits(pod, container)
}

// hostLimits reads a container's limits from its v1 cgroup files on this
// machine.
func (e *Env) hostLimits(pod *corev1.Pod, container string) (Limits, error) {
	l := Limits{Version: 1}
	mem, err := e.ContainerDir(pod, container, "memory")
	if err != nil {
		return l, err
	}
	cpu, err := e.ContainerDir(pod, container, "cpu")
	if err != nil {
		return l, err
	}
	for _, f := range []struct {
		path string
		into *int64
	}{
		{filepath.Join(mem, "memory.limit_in_bytes"), &l.MemoryBytes},
		{filepath.Join(cpu, "cpu.cfs_quota_us"), &l.CPUQuotaMicros},
		{filepath.Join(cpu, "cpu.cfs_period_us"), &l.CPUPeriodMicros},
		{filepath.Join(cpu, "cpu.shares"), &l.CPUShares},
	} {
		raw, err := os.ReadFile(f.path)
		if err != nil {
			return l, err
		}
		v, err := strconv.ParseInt(strings.TrimSpace(string(raw)), 10, 64)
		if err != nil {
			return l, fmt.Errorf("%s: %w", f.path, err)
		}
		*f.into = v
	}
	return l, nil
}

// errNotAnswering is matched by the error of a workload's endpoint that
// does not answer, as while its container restarts after an OOM kill.
var errNotAnswering = errors.New("the workload does not answer")

// workloadLimits asks the workload in pod for its container's limits
// (kerf-workload's GET /limits).
func (e *Env) workloadLimits(ctx context.Context, pod *corev1.Pod, container string) (Limits, error) {
	var l Limits
	if container != Container {
		return l, fmt.Errorf("pod %s/%s on node %s: the workload reports the limits of its own container %q only, not %q", pod.Namespace, pod.Name, pod.Spec.NodeName, Container, container)
	}
	if pod.Status.PodIP == "" {
		return l, fmt.Errorf("pod %s/%s has no IP yet: %w", pod.Namespace, pod.Name, errNotAnswering)
	}
	url := fmt.Sprintf("http://%s:%d/limits", pod.Status.PodIP, controlPort)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return l, err
	}
	resp, err := e.httpClient().Do(req)
	if err != nil {
		return l, fmt.Errorf("GET %s (pod %s on node %s): %w: %v", url, pod.Name, pod.Spec.NodeName, errNotAnswering, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if err != nil {
		return l, fmt.Errorf("GET %s: %w: %v", url, errNotAnswering, err)
	}
	switch {
	case resp.StatusCode == http.StatusNotFound:
		return l, fmt.Errorf("GET %s: %s: the image %s predates GET /limits", url, resp.Status, WorkloadImage)
	case resp.StatusCode != http.StatusOK:
		return l, fmt.Errorf("GET %s: %s: %s", url, resp.Status, strings.TrimSpace(string(body)))
	}
	if err := json.Unmarshal(body, &l); err != nil {
		return l, fmt.Errorf("GET %s: %w", url, err)
	}
	if l.Version != 1 && l.Version != 2 {
		return l, fmt.Errorf("GET %s: cgroupVersion %d: want 1 or 2", url, l.Version)
	}
	return l, nil
}

// restarting says whether err is that of reading the limits of a container
// that is not there right now: after an OOM kill its old cgroup is gone
// until the pod's status names the new one, and its endpoint does not
// answer until it runs again.
func restarting(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, errNotAnswering)
}

// onVMNode says whether node is the sandbox's VM node (label
// sandbox.VMNodeTaint=true), whose cgroup files this machine cannot read.
// An empty node (a pod not scheduled yet) is not. Nodes keep their labels
// in the sandbox: the answer is read once per node.
func (e *Env) onVMNode(ctx context.Context, node string) (bool, error) {
	if node == "" {
		return false, nil
	}
	e.nodeMu.Lock()
	vm, ok := e.vmNodes[node]
	e.nodeMu.Unlock()
	if ok {
		return vm, nil
	}
	var n corev1.Node
	if err := e.Client.Get(ctx, client.ObjectKey{Name: node}, &n); err != nil {
		return false, fmt.Errorf("node %s: %w", node, err)
	}
	vm = n.Labels[sandbox.VMNodeTaint] == "true"
	e.nodeMu.Lock()
	if e.vmNodes == nil {
		e.vmNodes = map[string]bool{}
	}
	e.vmNodes[node] = vm
	e.nodeMu.Unlock()
	return vm, nil
}

// VMNodeGrace is added to the scenarios' waits when their pods may run on
// the VM node: under emulation (TCG) a pod takes 5-30 s to start, and
// every restart and resize is as slow (docs/vmnode.md).
const VMNodeGrace = 4 * time.Minute

// WaitKernelLimits waits until the container of every running pod matching
// sel has the given limits in its cgroup (memory in bytes, cpu in
// millicores; 0 leaves one unchecked) and returns when it saw them.
func (e *Env) WaitKernelLimits(ctx context.Context, sel map[string]string, container string, memory, cpuMillis int64, timeout time.Duration) (time.Time, error) {
	var seen time.Time
	var last error // the last read that failed while the container restarted
	err := Poll(ctx, timeout, 20*time.Millisecond, fmt.Sprintf("the kernel to enforce memory=%d cpu=%dm on %s", memory, cpuMillis, container), func(ctx context.Context) (bool, error) {
		pods, err := e.RunningPods(ctx, sel)
		if err != nil || len(pods) == 0 {
			return false, err
		}
		for i := range pods {
			l, err := e.KernelLimits(ctx, &pods[i], container)
			if restarting(err) {
				last = err
				return false, nil
			}
			if err != nil {
				return false, err
			}
			if memory != 0 && l.MemoryBytes != memory || cpuMillis != 0 && l.CPUMillis() != cpuMillis {
				return false, nil
			}
		}
		seen = time.Now()
		return true, nil
	})
	if err != nil && last != nil {
		err = fmt.Errorf("%w (while restarting: %v)", err, last)
	}
	return seen, err
}

// CurrentLimits returns the kernel's limits of container in the first
// running pod sel selects, waiting up to timeout while the container
// restarts (its pod's status still names the cgroup the kernel removed, or
// its endpoint does not answer yet).
func (e *Env) CurrentLimits(ctx context.Context, sel map[string]string, container string, timeout time.Duration) (Limits, error) {
	var l Limits
	var last error
	err := Poll(ctx, timeout, 20*time.Millisecond, "the kernel's limits of "+container, func(ctx context.Context) (bool, error) {
		pods, err := e.RunningPods(ctx, sel)
		if err != nil || len(pods) == 0 {
			return false, err
		}
		l, err = e.KernelLimits(ctx, &pods[0], container)
		if restarting(err) {
			last = err
			return false, nil
		}
		return err == nil, err
	})
	if err != nil && last != nil {
		err = fmt.Errorf("%w (while restarting: %v)", err, last)
	}
	return l, err
}

// Control sends a command to the workload's HTTP control endpoint in pod:
// POST /<verb>?<query>. A command that never reached the workload (the
// connection was not made, or the request not written) is sent again for
// up to 30 s: on a busy machine a pod's first connection can take longer
// than the client's timeout. A crash or alloc that reached it may end the
// process before it answers; that is the point, and not an error.
func (e *Env) Control(ctx context.Context, pod *corev1.Pod, verb, query string) error {
	if pod.Status.PodIP == "" {
		return fmt.Errorf("pod %s has no IP yet", pod.Name)
	}
	url := fmt.Sprintf("http://%s:%d/%s", pod.Status.PodIP, controlPort, verb)
	if query != "" {
		url += "?" + query
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		sent, err := e.post(ctx, url)
		switch {
		case err == nil:
			return nil
		case sent && (verb == "crash" || verb == "alloc"):
			return nil
		case sent:
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: never sent within 30 s", err)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// post sends an empty POST to url and says whether the request was
// written to the connection, whatever the answer.
func (e *Env) post(ctx context.Context, url string) (sent bool, err error) {
	var mu sync.Mutex
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{WroteRequest: func(w httptrace.WroteRequestInfo) {
		mu.Lock()
		sent = sent || w.Err == nil
		mu.Unlock()
	}})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, nil)
	if err != nil {
		return false, err
	}
	resp, err := e.httpClient().Do(req)
	mu.Lock()
	defer mu.Unlock()
	if err != nil {
		return sent, fmt.Errorf("POST %s: %w", url, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode >= 300 {
		return true, fmt.Errorf("POST %s: %s: %s", url, resp.Status, strings.TrimSpace(string(body)))
	}
	return true, nil
}

// controlPort is the port of the workload's HTTP control endpoint.
const controlPort = 8080

// quantity parses a quantity the scenarios spell as constants.
func quantity(s string) *resource.Quantity {
	q := resource.MustParse(s)
	return &q
}
