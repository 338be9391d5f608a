// Package agenttest runs the real kerf-agent binary for benchmarks: built
// as hack/build.sh builds it, as a child process over a node of fixture
// pods (real pods on a real apiserver, real v1 cgroups where the kubelet's
// cgroupfs driver puts them, under a --cgroup-root of their own), measured
// from /proc/<pid>. The agent's budget benchmark (cmd/kerf-agent) and the
// comparison with cadvisor (test/peers) share it.
package agenttest

import (
	"bufio"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"fmt"
	mrand "math/rand/v2"
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
	"github.com/kerf-dev/kerf/test/freeport"
	"github.com/kerf-dev/kerf/test/kerneltest"
	"github.com/kerf-dev/kerf/test/memtest"
	"github.com/kerf-dev/kerf/test/streamtest"
)

// Container is one fixture container: who it is on the apiserver and
// where its cgroup is.
type Container struct {
	// Namespace, Pod and Name are its pod's namespace and name and its
	// own name, the labels the agent exports it under.
	Namespace, Pod, Name string
	// Rel is its cgroup path below the mounts, e.g.
	// /kerf-budget-1a2b3c4d/kubepods/burstable/pod<uid>/<id>: cadvisor's
	// id label.
	Rel string
	// Dirs are its directories, one per mount of the Node, the cpu one
	// first.
	Dirs []string
}

// Node is a node of fixture pods.
type Node struct {
	// Name is the node's name, Namespace the pods'.
	Name, Namespace string
	// Root is the kubelet --cgroup-root the pods' cgroups are under.
	Root string
	// Mounts are the v1 mounts the cgroups are made in, the cpu one first
	// (cpu and cpuacct may share one), then memory.
	Mounts []cgroup.Mount
	// Containers are every pod's containers, pod by pod.
	Containers []Container
}

// Cgroups checks this machine can hold the fixture cgroups (root, v1 cpu,
// cpuacct and memory controllers) or skips, and returns a kubelet
// --cgroup-root of its own named after prefix (so a kubelet on this
// machine is left alone) and the mounts to make cgroups in, the cpu one
// first.
func Cgroups(tb testing.TB, prefix string) (string, []cgroup.Mount) {
	tb.Helper()
	var mounts []cgroup.Mount
	seen := map[string]bool{}
	for _, ctrl := range []string{"cpu", "cpuacct", "memory"} {
		_, m := kerneltest.V1Controller(tb, ctrl)
		if !seen[m.Path] { // cpu,cpuacct may share a mount
			seen[m.Path] = true
			mounts = append(mounts, m)
		}
	}
	return fmt.Sprintf("/%s-%08x", prefix, mrand.Uint32()), mounts
}

// NewNode creates, on the apiserver cs, namespace's pods 0..pods-1 of
// node name with containers containers each (Pod), and their cgroups
// under root in mounts (as Cgroups returns them); the test's cleanup
// removes the cgroups. The namespace must exist.
func NewNode(tb testing.TB, cs kubernetes.Interface, name, namespace, root string, mounts []cgroup.Mount, pods, containers int) *Node {
	tb.Helper()
	n := &Node{Name: name, Namespace: namespace, Root: root, Mounts: mounts}
	layout := cgroup.Layout{Driver: cgroup.DriverCgroupfs, Root: root}
	for i := range pods {
		p := Pod(tb, cs, name, namespace, i, containers)
		for _, st := range p.Status.ContainerStatuses {
			rel, err := layout.ContainerDir(cgroup.PodCgroup{UID: string(p.UID), QoS: cgroup.QoSClass(p.Status.QOSClass)}, st.ContainerID)
			require.NoError(tb, err)
			c := Container{Namespace: namespace, Pod: p.Name, Name: st.Name, Rel: rel}
			for _, m := range mounts {
				c.Dirs = append(c.Dirs, kerneltest.MakeCgroupPath(tb, m.Path, rel))
			}
			n.Containers = append(n.Containers, c)
		}
	}
	require.Len(tb, n.Containers, pods*containers)
	return n
}

// Run starts argv (a program and its arguments) in the cgroups ds, one
// per hierarchy, before it runs anything else: a shell writes itself into
// each cgroup.procs, then execs argv. It returns the process, killed by
// the test's cleanup if still running.
func Run(tb testing.TB, ds []string, argv ...string) *exec.Cmd {
	tb.Helper()
	script := ""
	for i := range ds {
		script += fmt.Sprintf(`echo $$ > "$%d/cgroup.procs" && `, i+1)
	}
	script += fmt.Sprintf(`shift %d && exec "$@"`, len(ds))
	cmd := exec.Command("/bin/sh", append(append([]string{"-c", script, "sh"}, ds...), argv...)...)
	require.NoError(tb, cmd.Start())
	tb.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return cmd
}

// BusyLoop runs a shell busy loop in the cgroups ds (one per hierarchy);
// the test's cleanup kills it.
func BusyLoop(tb testing.TB, ds []string) *exec.Cmd {
	tb.Helper()
	return Run(tb, ds, "/bin/sh", "-c", "while :; do :; done")
}

// Pod creates pod i of node in namespace as a Deployment's pod looks:
// labels, an owner, containers containers with requests (Burstable),
// ports, env, probes and a mount each, and gives it the status of running
// containers with fresh containerd ids.
func Pod(tb testing.TB, cs kubernetes.Interface, node, namespace string, i, containers int) *corev1.Pod {
	tb.Helper()
	ctx := tb.Context()
	app := fmt.Sprintf("app-%03d", i)
	var cs0 []corev1.Container
	for c := range containers {
		cs0 = append(cs0, corev1.Container{
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
	p, err := cs.CoreV1().Pods(namespace).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: namespace, Name: fmt.Sprintf("%s-7d9f8c6b5-%05d", app, i),
			Labels:          map[string]string{"app.kubernetes.io/name": app, "app.kubernetes.io/part-of": "shop", "pod-template-hash": "7d9f8c6b5"},
			Annotations:     map[string]string{"prometheus.io/scrape": "true", "prometheus.io/port": "8080"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: app + "-7d9f8c6b5", UID: "0d5bd7d4-3c1e-4f7a-9b6e-6f1f2b3c4d5e", Controller: ptr.To(true)}},
		},
		Spec: corev1.PodSpec{
			NodeName:                     node,
			AutomountServiceAccountToken: ptr.To(false),
			Containers:                   cs0,
			Volumes: []corev1.Volume{{Name: "config", VolumeSource: corev1.VolumeSource{
				ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: app + "-config"}}}}},
		},
	}, metav1.CreateOptions{})
	require.NoError(tb, err)
	require.Equal(tb, corev1.PodQOSBurstable, p.Status.QOSClass)
	started := metav1.Now()
	p.Status.Phase = corev1.PodRunning
	p.Status.HostIP, p.Status.PodIP = "10.0.0.10", fmt.Sprintf("10.244.%d.%d", i/250, i%250+2)
	p.Status.StartTime = &started
	for _, t := range []corev1.PodConditionType{corev1.PodScheduled, corev1.PodInitialized, corev1.ContainersReady, corev1.PodReady} {
		p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: t, Status: corev1.ConditionTrue, LastTransitionTime: started})
	}
	for _, c := range cs0 {
		id := make([]byte, 32)
		_, _ = rand.Read(id)
		p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, corev1.ContainerStatus{
			Name: c.Name, Image: c.Image, ImageID: c.Image + "@sha256:" + hex.EncodeToString(id),
			ContainerID: "containerd://" + hex.EncodeToString(id),
			Ready:       true, Started: ptr.To(true),
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: started}},
		})
	}
	p, err = cs.CoreV1().Pods(namespace).UpdateStatus(ctx, p, metav1.UpdateOptions{})
	require.NoError(tb, err)
	return p
}

// AgentPod creates the agent's own pod on node, run as service account
// sa, for its bound stream token (streamtest.CreateToken).
func AgentPod(tb testing.TB, cs kubernetes.Interface, namespace, name, node, sa string) *corev1.Pod {
	tb.Helper()
	return streamtest.CreatePod(tb, cs, namespace, name, node, sa)
}

// BuildAgent builds kerf-agent with hack/build.sh, as its image has it,
// into a temporary directory and returns its path; tags are added as
// KERF_BUILD_TAGS (e.g. kerfpprof).
func BuildAgent(tb testing.TB, tags ...string) string {
	tb.Helper()
	repo, err := kube.RepoRoot()
	require.NoError(tb, err)
	dir := tb.TempDir()
	cmd := exec.Command(filepath.Join(repo, "hack", "build.sh"), dir, "kerf-agent")
	cmd.Dir = repo
	cmd.Env = os.Environ()
	if len(tags) > 0 {
		cmd.Env = append(cmd.Env, "KERF_BUILD_TAGS="+strings.Join(tags, ","))
	}
	out, err := cmd.CombinedOutput()
	require.NoError(tb, err, "hack/build.sh kerf-agent: %s", out)
	return filepath.Join(dir, "kerf-agent")
}

// Process is a running child process with a Prometheus /metrics: the
// agent, or a peer it is compared with.
type Process struct {
	// Cmd is the child.
	Cmd *exec.Cmd
	// Addr is its /metrics host:port, MetricsURL the URL.
	Addr, MetricsURL string
	// PprofURL is the agent's /debug/pprof/ URL, "" unless started with
	// Options.Pprof.
	PprofURL string

	name    string
	token   string
	client  *http.Client
	proto   string // of the last scrape's answer
	logFile string
	exited  chan struct{} // closed once it exited, with waitErr set
	waitErr error
}

// Options are how Start runs a child.
type Options struct {
	// Name names it in failures, e.g. kerf-agent.
	Name string
	// AddrFlag is the flag its /metrics address is given in, e.g.
	// --metrics-addr= (the address is appended).
	AddrFlag string
	// Env is added to its environment (NAME=value).
	Env []string
	// Pprof serves the agent's pprof (a kerfpprof build) on a free port,
	// through KERF_AGENT_PPROF_ADDR.
	Pprof bool
	// Token is sent as the bearer token of Scrape (the agent's /metrics
	// asks for one allowed to get /metrics); empty sends none.
	Token string
	// MetricsCA, when set, makes Scrape use HTTPS and accept only a
	// certificate for MetricsServerName that MetricsCA verifies: the
	// agent's with --metrics-tls once the leader signed it
	// (leadertest.Stream.MetricsPool). Until then Scrape fails, so the
	// waits retry.
	MetricsCA         *x509.CertPool
	MetricsServerName string
}

// scrapeTransport is an http.Transport as Prometheus scrapes with
// (prometheus/common's config.NewRoundTripperFromConfig at a scrape
// config's defaults): kept-alive connections, idle for up to 5 minutes, so
// one connection (and one TLS handshake) serves every scrape; HTTP/2 over
// TLS (enable_http2 defaults to true). Go asks for gzip and decompresses,
// as Prometheus's enable_compression does.
func scrapeTransport(tlsConfig *tls.Config) *http.Transport {
	t := &http.Transport{
		MaxIdleConns:          20000,
		MaxIdleConnsPerHost:   1000,
		IdleConnTimeout:       5 * time.Minute,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
		TLSClientConfig:       tlsConfig,
		Protocols:             &http.Protocols{},
	}
	t.Protocols.SetHTTP1(true)
	t.Protocols.SetHTTP2(true)
	return t
}

// Start starts bin with args, its /metrics on a free loopback port; it is
// stopped (SIGINT, then SIGKILL after 10 s) when tb ends, and a non-zero
// exit fails tb.
func Start(tb testing.TB, bin string, args []string, opts Options) *Process {
	tb.Helper()
	addr := freeport.Addr(tb)
	scheme, tlsConfig := "http", (*tls.Config)(nil)
	if opts.MetricsCA != nil {
		scheme, tlsConfig = "https", &tls.Config{RootCAs: opts.MetricsCA, ServerName: opts.MetricsServerName, MinVersion: tls.VersionTLS12}
	}
	transport := scrapeTransport(tlsConfig)
	tb.Cleanup(transport.CloseIdleConnections)
	p := &Process{Addr: addr, MetricsURL: scheme + "://" + addr + "/metrics", name: opts.Name, token: opts.Token,
		client:  &http.Client{Timeout: 10 * time.Second, Transport: transport},
		logFile: filepath.Join(tb.TempDir(), opts.Name+".log"), exited: make(chan struct{})}
	logs, err := os.Create(p.logFile)
	require.NoError(tb, err)
	p.Cmd = exec.Command(bin, append(args, opts.AddrFlag+addr)...)
	p.Cmd.Stdout, p.Cmd.Stderr = logs, logs
	p.Cmd.Env = append(os.Environ(), opts.Env...)
	if opts.Pprof {
		pa := freeport.Addr(tb)
		p.PprofURL = "http://" + pa + "/debug/pprof/"
		p.Cmd.Env = append(p.Cmd.Env, "KERF_AGENT_PPROF_ADDR="+pa)
	}
	require.NoError(tb, p.Cmd.Start())
	go func() {
		p.waitErr = p.Cmd.Wait()
		_ = logs.Close()
		close(p.exited)
	}()
	tb.Cleanup(func() {
		_ = p.Cmd.Process.Signal(os.Interrupt)
		select {
		case <-p.exited:
			if p.waitErr != nil {
				tb.Errorf("%s exited with %v; its log: %s", p.name, p.waitErr, p.Tail())
			}
		case <-time.After(10 * time.Second):
			_ = p.Cmd.Process.Kill()
			<-p.exited
			tb.Errorf("%s did not stop within 10 s of SIGINT; its log: %s", p.name, p.Tail())
		}
	})
	return p
}

// Tail returns the end of the child's log.
func (p *Process) Tail() string {
	data, _ := os.ReadFile(p.logFile)
	if len(data) > 4000 {
		data = data[len(data)-4000:]
	}
	return string(data)
}

// WaitMetric waits until the unlabelled sample name of the child's
// /metrics is n.
func (p *Process) WaitMetric(tb testing.TB, name string, n float64, timeout time.Duration) {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	var last float64
	for time.Now().Before(deadline) {
		select {
		case <-p.exited:
			tb.Fatalf("%s exited (%v): %s", p.name, p.waitErr, p.Tail())
		default:
		}
		if m, err := p.Scrape(); err == nil {
			if last = m[name]; last == n {
				return
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	tb.Fatalf("%s's %s is %v after %v, not %v; its log: %s", p.name, name, last, timeout, n, p.Tail())
}

// WaitTracked waits until the agent's /metrics shows n tracked containers.
func (p *Process) WaitTracked(tb testing.TB, n int, timeout time.Duration) {
	tb.Helper()
	p.WaitMetric(tb, "kerf_agent_tracked_containers", float64(n), timeout)
}

// Metrics scrapes the child and fails tb when it cannot.
func (p *Process) Metrics(tb testing.TB) map[string]float64 {
	tb.Helper()
	m, err := p.Scrape()
	require.NoError(tb, err, "scrape %s", p.name)
	return m
}

// Scrape gets /metrics as Prometheus asks for it (text, gzip) and returns
// its unlabelled samples by name.
func (p *Process) Scrape() (map[string]float64, error) {
	req, err := http.NewRequest(http.MethodGet, p.MetricsURL, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/openmetrics-text;version=1.0.0;q=0.5,text/plain;version=0.0.4;q=0.2,*/*;q=0.1")
	if p.token != "" {
		req.Header.Set("Authorization", "Bearer "+p.token)
	}
	resp, err := p.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", p.MetricsURL, resp.Status)
	}
	p.proto = resp.Proto
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

// Proto returns the protocol of the last scrape's answer (HTTP/1.1,
// HTTP/2.0), "" before the first.
func (p *Process) Proto() string { return p.proto }

// CPUTime returns the child's user plus system CPU time from
// /proc/<pid>/stat (utime and stime, fields 14 and 15, in clock ticks of
// 1/100 s: USER_HZ is 100 on Linux).
func (p *Process) CPUTime(tb testing.TB) time.Duration {
	tb.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.Cmd.Process.Pid))
	require.NoError(tb, err)
	// Fields after the command name, which is in parentheses and may hold
	// spaces: the third of them is field 3 (state).
	rest := string(data[strings.LastIndexByte(string(data), ')')+2:])
	f := strings.Fields(rest)
	require.Greater(tb, len(f), 12, "/proc/<pid>/stat: %s", data)
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	require.NoError(tb, err1, "utime in /proc/<pid>/stat")
	require.NoError(tb, err2, "stime in /proc/<pid>/stat")
	return time.Duration(utime+stime) * 10 * time.Millisecond
}

// StatusMiB returns a kB field of the child's /proc/<pid>/status (VmRSS,
// VmHWM, RssAnon, ...) in MiB.
func (p *Process) StatusMiB(tb testing.TB, field string) float64 {
	tb.Helper()
	return memtest.MiB(memtest.Status(tb, p.Cmd.Process.Pid, field))
}
