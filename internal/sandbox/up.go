package sandbox

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// Up starts the sandbox under opts.StateDir and returns it once the node
// is Ready and the default ServiceAccount exists. A healthy sandbox already
// running there is reused (Cluster.Reused); one left by a crash (no
// component running) is cleaned and started afresh; a partly running one
// is an error that says to run 'kerf-sandbox down'. When a step fails, Up
// stops what it started, keeps the logs and names the failing one.
func Up(ctx context.Context, opts Options) (*Cluster, error) {
	r, err := resolve(opts)
	if err != nil {
		return nil, err
	}
	if os.Geteuid() != 0 {
		return nil, errors.New("kerf-sandbox up needs root (mounts, cgroups, bridge, iptables)")
	}
	if c, err := r.reuseOrClean(ctx); c != nil || err != nil {
		return c, err
	}
	if r.PauseImage == "" {
		return nil, fmt.Errorf("Options.PauseImage: required to start a sandbox: an image archive tagged %s (a fresh containerd has no images)", PauseImageRef)
	}
	if _, err := os.Stat(r.PauseImage); err != nil {
		return nil, fmt.Errorf("Options.PauseImage: %w", err)
	}
	if err := checkStateDisk(r.StateDir); err != nil {
		return nil, err
	}
	if err := checkPorts(); err != nil {
		return nil, fmt.Errorf("%w (another sandbox? 'kerf-sandbox status' and 'kerf-sandbox down')", err)
	}
	if linkExists(BridgeName) {
		return nil, fmt.Errorf("network interface %s already exists (another sandbox? 'kerf-sandbox status' and 'kerf-sandbox down')", BridgeName)
	}
	if r.VMNode && linkExists(VMTap) {
		return nil, fmt.Errorf("network interface %s already exists (another sandbox with a VM node? 'kerf-sandbox status' and 'kerf-sandbox down')", VMTap)
	}

	began := time.Now()
	c, err := r.up(ctx)
	if err != nil {
		r.Log.Error("sandbox did not start; stopping what was started, logs kept", "logs", r.l.logs())
		if derr := teardown(context.WithoutCancel(ctx), r.l, r.Log, false); derr != nil {
			r.Log.Error("clean up after the failed start", "err", derr)
		}
		return nil, fmt.Errorf("%w\n(logs are in %s; 'kerf-sandbox down --state-dir %s' removes them)", err, r.l.logs(), r.StateDir)
	}
	r.Log.Info("sandbox is up", "took", seconds(time.Since(began)), "kubeconfig", c.Kubeconfig)
	return c, nil
}

// reuseOrClean looks at what is already in the state directory: a healthy
// sandbox is returned, a crashed one removed, a partial one refused.
func (r *resolved) reuseOrClean(ctx context.Context) (*Cluster, error) {
	st, err := Status(ctx, r.StateDir)
	if err != nil || !st.Exists {
		return nil, err
	}
	switch {
	case st.Healthy():
		if st.NodeName != r.NodeName {
			return nil, fmt.Errorf("a sandbox with node %q runs at %s, not %q: run 'kerf-sandbox down --state-dir %s' first",
				st.NodeName, r.StateDir, r.NodeName, r.StateDir)
		}
		if (st.VMNode != "") != r.VMNode {
			return nil, fmt.Errorf("the sandbox at %s runs with VM node %q, and Options.VMNode is %v: run 'kerf-sandbox down --state-dir %s' first",
				r.StateDir, st.VMNode, r.VMNode, r.StateDir)
		}
		r.Log.Info("reusing the healthy sandbox already running", "stateDir", r.StateDir)
		c, err := connect(r.l, r.NodeName)
		if err != nil {
			return nil, err
		}
		c.Reused = true
		c.VMNode = st.VMNode
		return c, nil
	case st.Running() == 0:
		r.Log.Warn("found a stale sandbox (no component running, e.g. after a crash or reboot): cleaning it up and starting over", "stateDir", r.StateDir)
		if err := teardown(ctx, r.l, r.Log, true); err != nil {
			return nil, fmt.Errorf("clean up the stale sandbox at %s: %w", r.StateDir, err)
		}
		return nil, nil
	default:
		return nil, fmt.Errorf("a sandbox at %s runs but is not healthy:\n%s\nrun 'kerf-sandbox down --state-dir %s' and 'up' again", r.StateDir, st, r.StateDir)
	}
}

// up performs the start, step by step.
func (r *resolved) up(ctx context.Context) (*Cluster, error) {
	l, log := r.l, r.Log
	if err := os.MkdirAll(l.state, 0o700); err != nil {
		return nil, fmt.Errorf("create state dir: %w", err)
	}
	if err := os.MkdirAll(l.run(), 0o700); err != nil {
		return nil, fmt.Errorf("create state dir: %w", err)
	}
	if err := os.WriteFile(l.marker("node-name"), []byte(r.NodeName+"\n"), 0o644); err != nil {
		return nil, err
	}
	if err := os.WriteFile(l.marker(markerBinDir), []byte(r.binDir+"\n"), 0o644); err != nil {
		return nil, err
	}
	log.Info("writing certificates and configuration", "stateDir", l.state)
	if err := writeConfigs(l, r.NodeName); err != nil {
		return nil, err
	}
	if err := prepareHost(l); err != nil {
		return nil, err
	}
	// The VM node's disk is built while the control plane starts, and
	// waited for before this returns, whatever happens.
	vmDisk := func() error { return nil }
	if r.VMNode {
		if err := os.MkdirAll(l.vmDir(), 0o700); err != nil {
			return nil, err
		}
		if err := os.WriteFile(l.marker(markerVMNode), []byte(VMNodeName+"\n"), 0o644); err != nil {
			return nil, err
		}
		diskCtx, cancel := context.WithCancel(ctx)
		var diskErr error
		built := make(chan struct{})
		go func() {
			diskErr = r.buildVMDisk(diskCtx)
			close(built)
		}()
		vmDisk = func() error {
			<-built
			return diskErr
		}
		defer func() {
			cancel()
			<-built
		}()
	}

	procs := map[string]*process{}
	comps := map[string]component{}
	for _, c := range r.components() {
		comps[c.name] = c
	}
	launch := func(name string) error {
		log.Info("starting " + name)
		p, err := start(l, comps[name])
		if err != nil {
			return err
		}
		procs[name] = p
		return nil
	}
	// waitFor polls check until it succeeds, failing early if the
	// component's process exits, and logs how long it took.
	waitFor := func(name, what string, timeout time.Duration, check func(context.Context) error) error {
		began := time.Now()
		wctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		var last error
		for {
			if last = check(wctx); last == nil {
				log.Info(what, "after", seconds(time.Since(began)))
				return nil
			}
			var exited chan struct{}
			if p := procs[name]; p != nil {
				exited = p.exited
			}
			select {
			case <-exited:
				return stepError(l, name, fmt.Errorf("%w (%v) while waiting: %s", errExited, procs[name].err, what))
			case <-wctx.Done():
				return stepError(l, name, fmt.Errorf("%s: not done after %s: %v", what, seconds(time.Since(began)), last))
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	wait := func(name, what string, check func(context.Context) error) error {
		return waitFor(name, what, r.timeout, check)
	}

	if err := launch("etcd"); err != nil {
		return nil, err
	}
	if err := wait("etcd", "etcd healthy", httpCheck("http://127.0.0.1:"+strconv.Itoa(etcdClientPort)+"/health", nil)); err != nil {
		return nil, err
	}
	if err := launch("kube-apiserver"); err != nil {
		return nil, err
	}
	c, err := connect(l, r.NodeName)
	if err != nil {
		return nil, err
	}
	apiTLS, err := tlsFromConfig(c)
	if err != nil {
		return nil, err
	}
	if err := wait("kube-apiserver", "kube-apiserver ready", httpCheck(APIServerURL+"/readyz", apiTLS)); err != nil {
		return nil, err
	}
	insecure := &tls.Config{InsecureSkipVerify: true} // self-signed healthz of a local process
	for name, port := range map[string]int{"kube-controller-manager": kcmPort, "kube-scheduler": schedulerPort} {
		if err := launch(name); err != nil {
			return nil, err
		}
		if err := wait(name, name+" healthy", httpCheck("https://127.0.0.1:"+strconv.Itoa(port)+"/healthz", insecure)); err != nil {
			return nil, err
		}
	}
	if err := launch("containerd"); err != nil {
		return nil, err
	}
	if err := wait("containerd", "containerd serving", func(ctx context.Context) error {
		return exec.CommandContext(ctx, ctrBinary, "--address", l.containerdSocket(), "version").Run()
	}); err != nil {
		return nil, err
	}
	if err := r.importPause(ctx); err != nil {
		return nil, err
	}
	for _, img := range r.Images {
		if err := importImage(ctx, l.containerdSocket(), img); err != nil {
			return nil, fmt.Errorf("Options.Images: %w", err)
		}
	}
	if err := launch("kubelet"); err != nil {
		return nil, err
	}
	if err := wait("kubelet", "kubelet serving the Pods API at "+c.HostPodsAPISocket, func(context.Context) error {
		_, err := os.Stat(c.HostPodsAPISocket)
		return err
	}); err != nil {
		return nil, err
	}
	if err := wait("kubelet", "node "+r.NodeName+" Ready", func(ctx context.Context) error {
		ready, msg := nodeReady(ctx, l, r.NodeName)
		if !ready {
			return errors.New(msg)
		}
		return nil
	}); err != nil {
		return nil, err
	}
	if err := launch("kube-proxy"); err != nil {
		return nil, err
	}
	if err := wait("kube-proxy", "kube-proxy healthy", httpCheck("http://127.0.0.1:"+strconv.Itoa(proxyHealthzPort)+"/healthz", nil)); err != nil {
		return nil, err
	}
	if err := wait("kube-controller-manager", "default ServiceAccount exists", func(ctx context.Context) error {
		_, err := c.Clientset.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{})
		return err
	}); err != nil {
		return nil, err
	}
	if r.VMNode {
		if err := r.startVMNode(ctx, vmDisk, launch, waitFor); err != nil {
			return nil, err
		}
		c.VMNode = VMNodeName
	}
	raw, err := os.ReadFile(l.kubeconfigFor("admin"))
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(l.adminKubeconfig(), raw, 0o600); err != nil {
		return nil, fmt.Errorf("write kubeconfig: %w", err)
	}
	return c, nil
}

// importPause puts the pod sandbox image into containerd before the
// kubelet starts: the kubelet never pulls it, and there is no registry.
func (r *resolved) importPause(ctx context.Context) error {
	sock := r.l.containerdSocket()
	began := time.Now()
	r.Log.Info("importing the pause image", "archive", r.PauseImage)
	if err := importImage(ctx, sock, r.PauseImage); err != nil {
		return fmt.Errorf("Options.PauseImage: %w", err)
	}
	if !hasImage(ctx, sock, PauseImageRef) {
		return fmt.Errorf("Options.PauseImage: %s imported but does not tag %s", r.PauseImage, PauseImageRef)
	}
	r.Log.Info("pause image imported", "after", seconds(time.Since(began)))
	return nil
}

// prepareHost readies the machine: the bridge with the node address, the
// bridge netfilter sysctl kube-proxy relies on for pod-to-Service-to-pod
// on one bridge, and the bind mount of the kubelet's Pods API directory
// on HostPodsAPIDir. Each thing created is recorded for Down.
func prepareHost(l layout) error {
	if err := createBridge(); err != nil {
		return err
	}
	if err := os.WriteFile(l.marker(markerBridge), nil, 0o644); err != nil {
		return err
	}
	_ = os.WriteFile("/proc/sys/net/bridge/bridge-nf-call-iptables", []byte("1"), 0) // best effort; absent without br_netfilter
	if err := recordHostPaths(l); err != nil {
		return err
	}
	if err := os.MkdirAll(HostPodsAPIDir, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", HostPodsAPIDir, err)
	}
	if mps, _ := mountsUnder(HostPodsAPIDir); len(mps) > 0 {
		return fmt.Errorf("%s is already a mount point (another sandbox or kubelet?)", HostPodsAPIDir)
	}
	if kubepods, _ := filepath.Glob("/sys/fs/cgroup/*/kubepods"); len(kubepods) == 0 {
		if err := os.WriteFile(l.marker(markerKubepods), nil, 0o644); err != nil {
			return err
		}
	}
	return bindMount(l.podsAPIDir(), HostPodsAPIDir)
}

// httpCheck returns a check that GETs url and wants 200.
func httpCheck(url string, tlsConfig *tls.Config) func(context.Context) error {
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{
		TLSClientConfig: tlsConfig,
		DialContext:     (&net.Dialer{Timeout: time.Second}).DialContext,
		Proxy:           nil,
	}}
	return func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET %s: %s", url, resp.Status)
		}
		return nil
	}
}

// tlsFromConfig is the administrator's TLS settings as a *tls.Config.
func tlsFromConfig(c *Cluster) (*tls.Config, error) {
	cert, err := tls.X509KeyPair(c.Config.CertData, c.Config.KeyData)
	if err != nil {
		return nil, fmt.Errorf("admin client certificate: %w", err)
	}
	pool, err := certPool(c.Config.CAData)
	if err != nil {
		return nil, err
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: pool}, nil
}

func certPool(pemData []byte) (*x509.CertPool, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pemData) {
		return nil, errors.New("no CA certificate in the admin kubeconfig")
	}
	return pool, nil
}

func clientsetFor(c *Cluster) (kubernetes.Interface, error) {
	return kubernetes.NewForConfig(c.Config)
}

// ignoreNotFound returns nil for a NotFound error, err otherwise.
func ignoreNotFound(err error) error {
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// WaitPodRunning waits until the pod namespace/name is Running, and
// returns it.
func (c *Cluster) WaitPodRunning(ctx context.Context, namespace, name string) (*corev1.Pod, error) {
	for {
		p, err := c.Clientset.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
		if ignoreNotFound(err) != nil {
			return nil, err
		}
		if err == nil && p.Status.Phase == corev1.PodRunning {
			return p, nil
		}
		select {
		case <-ctx.Done():
			phase := "absent"
			if p != nil {
				phase = string(p.Status.Phase)
			}
			return nil, fmt.Errorf("pod %s/%s not Running (phase %s): %w", namespace, name, phase, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}
