// Package sandbox runs kerf-sandbox: a real one-node Kubernetes cluster on
// this machine (docs/design.md sections 1 and 9): etcd, kube-apiserver,
// kube-controller-manager, kube-scheduler, containerd with runc, a CNI
// bridge, kubelet and kube-proxy, each a detached process whose state, logs
// and PID live under one state directory. Up starts it (or reuses a healthy
// one), Status reports it, Down removes every trace of it.
package sandbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/kerf-dev/kerf/internal/kube"
)

// Fixed addresses of the sandbox. The apiserver and kubelet listen on the
// bridge's address, which exists only on this machine: the host reaches it
// directly and pods through the kubernetes Service (a loopback address
// would not be reachable from a pod's network namespace).
const (
	// DefaultStateDir is where the CLI keeps the sandbox. It must be on a
	// real disk: containerd's overlayfs snapshots cannot live on overlayfs.
	DefaultStateDir = "/var/lib/kerf-sandbox"
	// DefaultNodeName is the name the node registers with.
	DefaultNodeName = "kerf-sandbox"
	// PauseImageRef is the pod sandbox image containerd runs; Up imports it
	// from Options.PauseImage before the kubelet starts.
	PauseImageRef = "kerf.local/pause:1"
	// BridgeName is the CNI bridge the pods are attached to.
	BridgeName = "kerf0"
	// PodCIDR is the pods' address range, on the bridge only.
	PodCIDR = "10.88.77.0/24"
	// NodeIP is the bridge's own address: the node's InternalIP, where the
	// apiserver and the kubelet listen.
	NodeIP = "10.88.77.1"
	// ServiceCIDR is the Services' cluster IP range.
	ServiceCIDR = "10.96.0.0/24"
	// APIServiceIP is the cluster IP of the kubernetes Service.
	APIServiceIP = "10.96.0.1"
	// APIServerPort is the apiserver's secure port: not 6443, so it cannot
	// meet another cluster's apiserver on the machine.
	APIServerPort = 16443
	// APIServerURL is where every client of the sandbox reaches the apiserver.
	APIServerURL = "https://10.88.77.1:16443"
	// KubeletPort is the kubelet's API port (logs, exec).
	KubeletPort = 10350
	// HostPodsAPIDir is where Kerf's agent DaemonSet finds the kubelet's
	// Pods API socket on the host; Up bind-mounts the kubelet's directory here.
	HostPodsAPIDir = "/var/lib/kubelet/pods-api"

	etcdClientPort       = 23790
	etcdPeerPort         = 23800
	kcmPort              = 10357
	schedulerPort        = 10359
	kubeletHealthzPort   = 10348
	proxyMetricsPort     = 10349
	proxyHealthzPort     = 10356
	cniBinDir            = "/usr/lib/cni"
	containerdBinary     = "/usr/bin/containerd"
	ctrBinary            = "/usr/bin/ctr"
	runcBinary           = "/usr/sbin/runc"
	podsAPISocketName    = "pods-api.sock"
	defaultStartTimeout  = 3 * time.Minute
	componentStopTimeout = 10 * time.Second
)

// Component names, in start order; Down stops them in the reverse order.
var componentNames = []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "containerd", "kubelet", "kube-proxy"}

// Options configure Up.
type Options struct {
	// StateDir holds everything of the sandbox (DefaultStateDir in the CLI).
	// It must be an absolute path on a real disk.
	StateDir string
	// NodeName is the node's name; empty means DefaultNodeName.
	NodeName string
	// BinDir holds k8s-<version>/ and etcd-<version>/ as `make deps` builds
	// them; empty means $KERF_BIN_DIR, the repository's bin/, or the
	// directory of the running executable.
	BinDir string
	// PauseImage is an image archive that tags PauseImageRef; Up imports it
	// before the kubelet starts. Required, except to reuse a running sandbox.
	PauseImage string
	// Log receives progress; nil discards it.
	Log *slog.Logger
	// Timeout bounds each wait (a component becoming healthy, the node
	// becoming Ready); zero means 3 minutes. The VM node's own start waits
	// at least VMNodeTimeout.
	Timeout time.Duration
	// VMNode adds a second node, VMNodeName: a QEMU guest with Debian's
	// cgroup v2 kernel (bin/vm of `make deps`) running containerd and a
	// kubelet with its defaults. It carries the taint VMNodeTaint, so only
	// pods that tolerate it run there (Kerf's agent tolerates every taint).
	VMNode bool
	// Images are image archives every node gets: imported into the host
	// node's containerd after it starts and unpacked into the VM node's
	// disk before it boots. Cluster.ImportImage reaches the host node only.
	Images []string
}

// Cluster is a running sandbox.
type Cluster struct {
	// StateDir holds the sandbox's state, logs and PID files.
	StateDir string
	// NodeName is the node's name.
	NodeName string
	// Kubeconfig is the administrator's kubeconfig (system:masters).
	Kubeconfig string
	// Config reaches the apiserver as the administrator.
	Config *rest.Config
	// Clientset is a client-go clientset for Config.
	Clientset kubernetes.Interface
	// ContainerdSocket is the sandbox containerd's gRPC socket.
	ContainerdSocket string
	// KubeletRootDir is the kubelet's --root-dir.
	KubeletRootDir string
	// PodsAPISocket is the kubelet's Pods API socket in its root dir.
	PodsAPISocket string
	// HostPodsAPISocket is the same socket under HostPodsAPIDir, where the
	// agent DaemonSet mounts it from.
	HostPodsAPISocket string
	// Reused says Up found this sandbox running and healthy.
	Reused bool
	// VMNode is the VM node's name, empty when the sandbox has none.
	VMNode string
}

// resolved is Options with defaults filled in and binaries located.
type resolved struct {
	Options
	binDir  string
	l       layout
	bins    map[string]string
	timeout time.Duration
	// vmKernel and qemu boot the VM node (Options.VMNode).
	vmKernel vmKernel
	qemu     string
}

func resolve(opts Options) (*resolved, error) {
	r := &resolved{Options: opts, timeout: opts.Timeout}
	if r.StateDir == "" {
		return nil, errors.New("Options.StateDir: required (the CLI's default is " + DefaultStateDir + ")")
	}
	if !filepath.IsAbs(r.StateDir) {
		return nil, fmt.Errorf("Options.StateDir: %q is not an absolute path", r.StateDir)
	}
	r.StateDir = filepath.Clean(r.StateDir)
	if r.NodeName == "" {
		r.NodeName = DefaultNodeName
	}
	if r.Log == nil {
		r.Log = slog.New(slog.DiscardHandler)
	}
	if r.timeout == 0 {
		r.timeout = defaultStartTimeout
	}
	r.l = layout{state: r.StateDir}
	binDir, err := findBinDir(opts.BinDir)
	if err != nil {
		return nil, err
	}
	r.binDir = binDir
	k8s := kube.KubernetesDir(binDir)
	r.bins = map[string]string{
		"etcd":                    kube.EtcdBinary(binDir),
		"kube-apiserver":          filepath.Join(k8s, "kube-apiserver"),
		"kube-controller-manager": filepath.Join(k8s, "kube-controller-manager"),
		"kube-scheduler":          filepath.Join(k8s, "kube-scheduler"),
		"kubelet":                 filepath.Join(k8s, "kubelet"),
		"kube-proxy":              filepath.Join(k8s, "kube-proxy"),
		"containerd":              containerdBinary,
	}
	need := []string{ctrBinary, runcBinary, filepath.Join(cniBinDir, "bridge"), filepath.Join(cniBinDir, "host-local"),
		filepath.Join(cniBinDir, "loopback"), filepath.Join(cniBinDir, "portmap")}
	for _, name := range componentNames {
		need = append(need, r.bins[name])
	}
	for _, p := range need {
		if _, err := os.Stat(p); err != nil {
			return nil, fmt.Errorf("sandbox binary %s: %w (run 'make deps')", p, err)
		}
	}
	for _, tool := range []string{"ip", "iptables"} {
		if _, err := exec.LookPath(tool); err != nil {
			return nil, fmt.Errorf("sandbox needs %s on PATH: %w", tool, err)
		}
	}
	for i, img := range r.Images {
		if _, err := os.Stat(img); err != nil {
			return nil, fmt.Errorf("Options.Images[%d]: %w", i, err)
		}
	}
	if r.VMNode {
		if err := r.resolveVMNode(); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// findBinDir returns the bin/ directory with the binaries of `make deps`.
func findBinDir(explicit string) (string, error) {
	if explicit != "" {
		return explicit, nil
	}
	if d := os.Getenv("KERF_BIN_DIR"); d != "" {
		return d, nil
	}
	if root, err := kube.RepoRoot(); err == nil {
		if _, err := os.Stat(kube.KubernetesDir(filepath.Join(root, "bin"))); err == nil {
			return filepath.Join(root, "bin"), nil
		}
	}
	if exe, err := os.Executable(); err == nil {
		d := filepath.Dir(exe)
		if _, err := os.Stat(kube.KubernetesDir(d)); err == nil {
			return d, nil
		}
	}
	return "", errors.New("Options.BinDir: cannot find bin/k8s-" + kube.KubernetesVersion +
		" (run 'make deps' in the repository, run from inside it, or set --bin-dir / KERF_BIN_DIR)")
}

// components returns every component's command line.
func (r *resolved) components() []component {
	l, pki := r.l, r.l.pkiFile
	etcdURL := "http://127.0.0.1:" + strconv.Itoa(etcdClientPort)
	peerURL := "http://127.0.0.1:" + strconv.Itoa(etcdPeerPort)
	comps := []component{
		{name: "etcd", binary: r.bins["etcd"], args: []string{
			"--name=kerf-sandbox",
			"--data-dir=" + l.etcdData(),
			"--listen-client-urls=" + etcdURL, "--advertise-client-urls=" + etcdURL,
			"--listen-peer-urls=" + peerURL, "--initial-advertise-peer-urls=" + peerURL,
			"--initial-cluster=kerf-sandbox=" + peerURL,
		}},
		{name: "kube-apiserver", binary: r.bins["kube-apiserver"], args: []string{
			"--etcd-servers=" + etcdURL,
			"--bind-address=" + NodeIP, "--advertise-address=" + NodeIP,
			"--secure-port=" + strconv.Itoa(APIServerPort),
			"--cert-dir=" + filepath.Join(l.state, "apiserver-certs"),
			"--tls-cert-file=" + pki("apiserver.crt"), "--tls-private-key-file=" + pki("apiserver.key"),
			"--client-ca-file=" + pki("ca.crt"),
			"--authorization-mode=Node,RBAC",
			"--enable-admission-plugins=NodeRestriction",
			"--admission-control-config-file=" + l.admissionConfig(),
			"--allow-privileged=true",
			"--service-cluster-ip-range=" + ServiceCIDR,
			"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
			"--service-account-key-file=" + pki("sa.pub"),
			"--service-account-signing-key-file=" + pki("sa.key"),
			"--kubelet-client-certificate=" + pki("apiserver-kubelet-client.crt"),
			"--kubelet-client-key=" + pki("apiserver-kubelet-client.key"),
			"--kubelet-certificate-authority=" + pki("ca.crt"),
			"--kubelet-preferred-address-types=InternalIP",
		}},
		{name: "kube-controller-manager", binary: r.bins["kube-controller-manager"], args: []string{
			"--kubeconfig=" + l.kubeconfigFor("kube-controller-manager"),
			"--authentication-kubeconfig=" + l.kubeconfigFor("kube-controller-manager"),
			"--authorization-kubeconfig=" + l.kubeconfigFor("kube-controller-manager"),
			"--bind-address=127.0.0.1", "--secure-port=" + strconv.Itoa(kcmPort),
			"--cert-dir=" + filepath.Join(l.state, "kcm-certs"),
			// nodeipam off: the node has no podCIDR to hand out (CNI's
			// host-local IPAM owns the range); with it on the node keeps its
			// not-ready taint.
			"--controllers=*,-nodeipam",
			"--use-service-account-credentials=true",
			"--root-ca-file=" + pki("ca.crt"),
			"--service-account-private-key-file=" + pki("sa.key"),
			"--cluster-signing-cert-file=" + pki("ca.crt"), "--cluster-signing-key-file=" + pki("ca.key"),
			"--leader-elect=false",
		}},
		{name: "kube-scheduler", binary: r.bins["kube-scheduler"], args: []string{
			"--kubeconfig=" + l.kubeconfigFor("kube-scheduler"),
			"--authentication-kubeconfig=" + l.kubeconfigFor("kube-scheduler"),
			"--authorization-kubeconfig=" + l.kubeconfigFor("kube-scheduler"),
			"--bind-address=127.0.0.1", "--secure-port=" + strconv.Itoa(schedulerPort),
			"--cert-dir=" + filepath.Join(l.state, "scheduler-certs"),
			"--leader-elect=false",
		}},
		{name: "containerd", binary: r.bins["containerd"], args: []string{"--config=" + l.containerdConfig()}},
		{name: "kubelet", binary: r.bins["kubelet"], args: []string{
			"--config=" + l.kubeletConfig(),
			"--kubeconfig=" + l.kubeconfigFor("kubelet-client"),
			"--root-dir=" + l.kubeletRoot(),
			"--cert-dir=" + l.kubeletCertDir(),
			"--hostname-override=" + r.NodeName,
			"--node-ip=" + NodeIP,
		}},
		{name: "kube-proxy", binary: r.bins["kube-proxy"], args: []string{
			"--kubeconfig=" + l.kubeconfigFor("kube-proxy"),
			"--hostname-override=" + r.NodeName,
			"--proxy-mode=iptables",
			"--cluster-cidr=" + PodCIDR,
			"--metrics-bind-address=127.0.0.1:" + strconv.Itoa(proxyMetricsPort),
			"--healthz-bind-address=127.0.0.1:" + strconv.Itoa(proxyHealthzPort),
			// Leave the machine's conntrack settings and route_localnet alone.
			"--conntrack-max-per-core=0",
			"--conntrack-tcp-timeout-established=0",
			"--conntrack-tcp-timeout-close-wait=0",
			"--iptables-localhost-nodeports=false",
		}},
	}
	if r.VMNode {
		comps = append(comps, r.vmComponentOf())
	}
	return comps
}

// ports lists every TCP address a component listens on, checked free
// before the start so a clash is reported by name, not as a crash.
func ports() map[string]string {
	n := func(p int) string { return strconv.Itoa(p) }
	return map[string]string{
		"etcd client":             "127.0.0.1:" + n(etcdClientPort),
		"etcd peer":               "127.0.0.1:" + n(etcdPeerPort),
		"kube-apiserver":          NodeIP + ":" + n(APIServerPort),
		"kube-controller-manager": "127.0.0.1:" + n(kcmPort),
		"kube-scheduler":          "127.0.0.1:" + n(schedulerPort),
		"kubelet":                 NodeIP + ":" + n(KubeletPort),
		"kubelet healthz":         "127.0.0.1:" + n(kubeletHealthzPort),
		"kube-proxy metrics":      "127.0.0.1:" + n(proxyMetricsPort),
		"kube-proxy healthz":      "127.0.0.1:" + n(proxyHealthzPort),
	}
}

// checkPorts fails naming the first port in use. The NodeIP ports are
// checked on all addresses, as the bridge does not exist yet.
func checkPorts() error {
	for what, addr := range ports() {
		host, port, _ := net.SplitHostPort(addr)
		if host == NodeIP {
			addr = ":" + port
		}
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return fmt.Errorf("port %s for %s is in use: %w", port, what, err)
		}
		_ = ln.Close()
	}
	return nil
}

// checkStateDisk refuses a state directory on overlayfs or tmpfs, where
// containerd's overlayfs snapshotter cannot work.
func checkStateDisk(dir string) error {
	probe := dir
	for {
		if _, err := os.Stat(probe); err == nil {
			break
		}
		parent := filepath.Dir(probe)
		if parent == probe {
			break
		}
		probe = parent
	}
	var st syscall.Statfs_t
	if err := syscall.Statfs(probe, &st); err != nil {
		return fmt.Errorf("statfs %s: %w", probe, err)
	}
	const overlayMagic, tmpfsMagic = 0x794c7630, 0x01021994
	switch st.Type {
	case overlayMagic:
		return fmt.Errorf("Options.StateDir: %s is on overlayfs; containerd's overlayfs snapshots need a real disk (e.g. under /var/lib or /var/tmp)", dir)
	case tmpfsMagic:
		return fmt.Errorf("Options.StateDir: %s is on tmpfs; containerd's overlayfs snapshots need a real disk (e.g. under /var/lib or /var/tmp)", dir)
	}
	return nil
}

// seconds formats a duration for progress logs: "3.2 s".
func seconds(d time.Duration) string {
	return strconv.FormatFloat(d.Seconds(), 'f', 1, 64) + " s"
}

// stepError names the component that failed and shows the end of its log.
func stepError(l layout, name string, err error) error {
	return fmt.Errorf("%s: %w\nlast lines of %s:\n%s", name, err, l.logFile(name), tail(l.logFile(name), 25))
}

// ImportImage imports an image archive (docker-archive or OCI layout tar)
// into the sandbox containerd's Kubernetes namespace, where the kubelet
// finds it: pods use it with imagePullPolicy Never or IfNotPresent.
func (c *Cluster) ImportImage(ctx context.Context, archivePath string) error {
	return importImage(ctx, c.ContainerdSocket, archivePath)
}

func importImage(ctx context.Context, socket, archive string) error {
	if _, err := os.Stat(archive); err != nil {
		return fmt.Errorf("image archive: %w", err)
	}
	out, err := exec.CommandContext(ctx, ctrBinary, "-n", "k8s.io", "--address", socket, "images", "import", archive).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ctr images import %s: %v: %s", archive, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// hasImage reports whether the sandbox containerd has ref.
func hasImage(ctx context.Context, socket, ref string) bool {
	out, err := exec.CommandContext(ctx, ctrBinary, "-n", "k8s.io", "--address", socket, "images", "ls", "-q").Output()
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(out), "\n") {
		if strings.TrimSpace(line) == ref {
			return true
		}
	}
	return false
}

// connect builds the cluster handle from the state directory.
func connect(l layout, node string) (*Cluster, error) {
	kubeconfig := l.adminKubeconfig()
	if _, err := os.Stat(kubeconfig); err != nil {
		kubeconfig = l.kubeconfigFor("admin")
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("read kubeconfig %s: %w", kubeconfig, err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("clientset: %w", err)
	}
	return &Cluster{
		StateDir:          l.state,
		NodeName:          node,
		Kubeconfig:        l.adminKubeconfig(),
		Config:            cfg,
		Clientset:         cs,
		ContainerdSocket:  l.containerdSocket(),
		KubeletRootDir:    l.kubeletRoot(),
		PodsAPISocket:     filepath.Join(l.podsAPIDir(), podsAPISocketName),
		HostPodsAPISocket: filepath.Join(HostPodsAPIDir, podsAPISocketName),
	}, nil
}
