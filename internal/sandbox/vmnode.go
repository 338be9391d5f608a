package sandbox

// The sandbox's second node, a VM (Options.VMNode; docs/sandbox.md, "A
// second node"): the guest's addresses, its certificates signed by the
// sandbox's CA, its containerd, kubelet and CNI configuration, the tap
// device it reaches the host by, and QEMU as one more component. Its disk
// and initramfs: vmdisk.go.

import (
	"bytes"
	"context"
	"crypto"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// The VM node's network: a tap device on the host, a /30 link, and the
// guest's pod range routed through the guest. The guest reaches the
// apiserver at APIServerURL through its default route (the host).
const (
	// VMNodeName is the VM node's default name.
	VMNodeName = "kerf-vm"
	// VMTap is the host's tap device for the VM.
	VMTap = "kerfvm0"
	// VMHostIP is the host's address on the tap, the guest's gateway.
	VMHostIP = "10.88.76.1"
	// VMNodeIP is the guest's address: its InternalIP, where the apiserver
	// reaches its kubelet.
	VMNodeIP = "10.88.76.2"
	// VMLinkPrefix is the link's prefix length.
	VMLinkPrefix = 30
	// VMPodCIDR is the guest's pod range, routed on the host via VMNodeIP.
	VMPodCIDR = "10.88.78.0/24"
	// VMPodGateway is the guest bridge's address.
	VMPodGateway = "10.88.78.1"
	// VMNodeTaint is the key of the VM node's NoSchedule taint (value
	// "true") and of its label (the same): a pod meant for the v2 node
	// tolerates the one and selects the other.
	VMNodeTaint = "kerf.dev/vm-node"
	// VMNodeTimeout is the least Up waits for the VM node to be Ready: a
	// guest under TCG on a busy machine took 40 s.
	VMNodeTimeout = 5 * time.Minute
	// VMKVMEnv, set to "1", boots the VM node with KVM (as test/vmtest's
	// KVMEnv). TCG is the default: QEMU fails on this project's machines'
	// nested /dev/kvm.
	VMKVMEnv = "KERF_VM_KVM"
	// VMDebugShellEnv, set to "1" when Up runs, gives the guest a root
	// shell without authentication on VMNodeIP port 2323 (busybox
	// telnetd), for looking around: whoever reaches the tap gets root in
	// the guest, so it is off by default.
	VMDebugShellEnv = "KERF_VM_DEBUG_SHELL"
	// VMPanicOnceEnv, set to "1" when Up builds the disk, makes the guest
	// panic once, on its first boot before containerd starts, as a guest
	// that locked up does (softlockup_panic): Up boots it again. For
	// testing that path.
	VMPanicOnceEnv = "KERF_VM_PANIC_ONCE"
	// VMKernelArgs is the command line of the guest's kernel, here and in
	// test/vmtest. The guest panics on a soft lockup, and QEMU (-no-reboot)
	// then exits: under TCG on a busy machine both vCPUs of a guest have
	// hung in its kubelet's start for minutes. loglevel=5 (not quiet)
	// prints a warning's call trace on the console.
	VMKernelArgs = "console=ttyS0 loglevel=5 panic=-1 softlockup_panic=1 rdinit=/init"
	// VMBoots is how many times Up boots the VM node's guest when it
	// panics before its node is Ready.
	VMBoots = 3

	vmComponent  = "vm"
	qemuBinary   = "qemu-system-x86_64"
	markerVMNode = "vm-node"
	markerVMTap  = "created-vm-tap"
	// vmMemoryMiB is the guest's memory: the kubelet, containerd, the
	// agent and a few small workloads used about 300 MB.
	vmMemoryMiB = 1536
)

// vmNodeIdentities are the VM node's kubelet certificates: the client one
// the Node authorizer and NodeRestriction know (system:node:<name> in
// system:nodes) and the serving one for the apiserver's logs and exec.
func vmNodeIdentities(node string) []identity {
	return []identity{
		{file: "vm-kubelet-client", cn: "system:node:" + node, orgs: []string{"system:nodes"}},
		{file: "vm-kubelet-serving", cn: node, server: true, dns: []string{node},
			ips: []net.IP{net.ParseIP(VMNodeIP)}},
	}
}

// writeVMNodePKI issues the VM node's certificates under the sandbox's
// pki directory, signed by its CA (pki/ca.crt, pki/ca.key).
func writeVMNodePKI(dir, node string) error {
	ca, caKey, err := loadCA(dir)
	if err != nil {
		return err
	}
	now := time.Now().Add(-time.Hour)
	return issue(dir, vmNodeIdentities(node), ca, caKey, now)
}

// loadCA reads the sandbox's CA certificate and key from dir.
func loadCA(dir string) (*x509.Certificate, crypto.Signer, error) {
	crtPEM, err := os.ReadFile(filepath.Join(dir, "ca.crt"))
	if err != nil {
		return nil, nil, fmt.Errorf("sandbox CA: %w", err)
	}
	keyPEM, err := os.ReadFile(filepath.Join(dir, "ca.key"))
	if err != nil {
		return nil, nil, fmt.Errorf("sandbox CA: %w", err)
	}
	cb, _ := pem.Decode(crtPEM)
	kb, _ := pem.Decode(keyPEM)
	if cb == nil || kb == nil {
		return nil, nil, errors.New("sandbox CA: no PEM block in ca.crt or ca.key")
	}
	ca, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, nil, fmt.Errorf("sandbox CA certificate: %w", err)
	}
	k, err := x509.ParsePKCS8PrivateKey(kb.Bytes)
	if err != nil {
		return nil, nil, fmt.Errorf("sandbox CA key: %w", err)
	}
	signer, ok := k.(crypto.Signer)
	if !ok {
		return nil, nil, fmt.Errorf("sandbox CA key: %T cannot sign", k)
	}
	return ca, signer, nil
}

// Paths in the guest: containerd's and the kubelet's defaults, the node's
// files under /etc/kerf.
const (
	vmGuestConfigDir       = "/etc/kerf"
	vmGuestContainerdSock  = "/run/containerd/containerd.sock"
	vmGuestCNIBinDir       = "/usr/lib/cni"
	vmGuestCNIConfDir      = "/etc/cni/net.d"
	vmGuestKubeletConfig   = vmGuestConfigDir + "/kubelet.yaml"
	vmGuestKubeletKubeconf = vmGuestConfigDir + "/kubelet.kubeconfig"
)

// vmContainerdConfig is the guest containerd's configuration: the
// sandbox's CRI settings, containerd's defaults for everything else (its
// own machine: no restrict_oom_score_adj, default root, state and socket).
func vmContainerdConfig() string {
	r := strings.NewReplacer("$PAUSE", PauseImageRef, "$CNIBIN", vmGuestCNIBinDir, "$CNICONF", vmGuestCNIConfDir,
		"$RUNC", runcBinary)
	return r.Replace(`version = 2
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper"]
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$PAUSE"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        BinaryName = "$RUNC"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "$CNIBIN"
    conf_dir = "$CNICONF"
`)
}

// vmKubeletConfig is the guest kubelet's configuration: the kubelet's
// defaults (cgroupfs, failCgroupV1 and failSwapOn true, root dir
// /var/lib/kubelet with the Pods API socket where the agent DaemonSet
// mounts it from) but for the runtime endpoint and the same x509 and
// webhook authentication as the host node's.
func vmKubeletConfig() string {
	d := vmGuestConfigDir
	return `apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
containerRuntimeEndpoint: unix://` + vmGuestContainerdSock + `
tlsCertFile: ` + d + `/vm-kubelet-serving.crt
tlsPrivateKeyFile: ` + d + `/vm-kubelet-serving.key
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: true
  x509:
    clientCAFile: ` + d + `/ca.crt
authorization:
  mode: Webhook
clusterDomain: cluster.local
resolvConf: /etc/resolv.conf
registerWithTaints:
- key: ` + VMNodeTaint + `
  value: "true"
  effect: NoSchedule
`
}

// vmKubeletArgs are the guest kubelet's flags.
func vmKubeletArgs(node string) []string {
	return []string{
		"--config=" + vmGuestKubeletConfig,
		"--kubeconfig=" + vmGuestKubeletKubeconf,
		"--node-ip=" + VMNodeIP,
		"--hostname-override=" + node,
		"--node-labels=" + VMNodeTaint + "=true",
	}
}

// vmCNIConfig is the guest's bridge network: a bridge of the same name in
// the guest, its own pod range, host-local IPAM in its default directory,
// no portmap.
func vmCNIConfig() string {
	return bridgeConflist("kerf-sandbox-vm", VMPodCIDR, VMPodGateway, "", false)
}

// WriteVMNodeFiles issues the VM node's certificates with the sandbox's CA
// at stateDir (once: existing ones are kept) and writes the guest's files
// under root, the staging directory of its disk: /etc/kerf/ (CA, serving
// pair, kubelet configuration and kubeconfig, containerd configuration) and
// the CNI configuration.
func WriteVMNodeFiles(stateDir, node, root string) error {
	l := layout{state: stateDir}
	if _, err := os.Stat(l.pkiFile("vm-kubelet-client.crt")); errors.Is(err, os.ErrNotExist) {
		if err := writeVMNodePKI(l.pki(), node); err != nil {
			return err
		}
	}
	etc := filepath.Join(root, vmGuestConfigDir)
	if err := writeKubeconfig(l, filepath.Join(root, vmGuestKubeletKubeconf), "vm-kubelet-client"); err != nil {
		return err
	}
	files := map[string]string{
		filepath.Join(etc, "kubelet.yaml"):                         vmKubeletConfig(),
		filepath.Join(etc, "containerd.toml"):                      vmContainerdConfig(),
		filepath.Join(root, vmGuestCNIConfDir, "10-kerf.conflist"): vmCNIConfig(),
	}
	for _, name := range []string{"ca.crt", "vm-kubelet-serving.crt", "vm-kubelet-serving.key"} {
		raw, err := os.ReadFile(l.pkiFile(name))
		if err != nil {
			return err
		}
		files[filepath.Join(etc, name)] = string(raw)
	}
	for path, content := range files {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			return fmt.Errorf("write %s: %w", path, err)
		}
	}
	return nil
}

// vmComponentOf is QEMU booting the VM node: the kernel of `make deps`,
// the initramfs and disk under the state directory (so owned() knows the
// process), the console on its output (logs/vm.log), the network card on
// the tap.
func (r *resolved) vmComponentOf() component {
	l := r.l
	args := []string{
		"-kernel", r.vmKernel.image, "-initrd", l.vmInitrd(),
		"-append", VMKernelArgs,
		"-m", strconv.Itoa(vmMemoryMiB), "-smp", "2", "-nographic", "-no-reboot", "-nodefaults", "-serial", "stdio",
		"-drive", "file=" + l.vmDisk() + ",format=raw,if=virtio,cache=unsafe",
		"-netdev", "tap,id=n0,ifname=" + VMTap + ",script=no,downscript=no",
		"-device", "virtio-net-pci,netdev=n0,romfile=",
	}
	if os.Getenv(VMKVMEnv) == "1" {
		args = append(args, "-enable-kvm", "-cpu", "host")
	} else {
		args = append(args, "-cpu", "max")
	}
	return component{name: vmComponent, binary: r.qemu, args: args}
}

// createVMTap makes the host's end of the VM node's link: the tap, its
// address, the route to the guest's pods and IP forwarding.
func createVMTap() error {
	if linkExists(VMTap) {
		return fmt.Errorf("network interface %s already exists (another sandbox with a VM node? 'kerf-sandbox status' and 'kerf-sandbox down')", VMTap)
	}
	for _, args := range [][]string{
		{"tuntap", "add", "dev", VMTap, "mode", "tap"},
		{"addr", "add", VMHostIP + "/" + strconv.Itoa(VMLinkPrefix), "dev", VMTap},
		{"link", "set", VMTap, "up"},
		{"route", "replace", VMPodCIDR, "via", VMNodeIP, "dev", VMTap, "onlink"},
	} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
		}
	}
	if err := os.WriteFile("/proc/sys/net/ipv4/ip_forward", []byte("1"), 0); err != nil {
		return fmt.Errorf("enable IP forwarding for the VM node: %w", err)
	}
	return nil
}

// deleteVMTap removes the tap; its address and route go with it.
func deleteVMTap() error {
	if !linkExists(VMTap) {
		return nil
	}
	if out, err := exec.Command("ip", "link", "del", VMTap).CombinedOutput(); err != nil {
		return fmt.Errorf("ip link del %s: %v: %s", VMTap, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// resolveVMNode checks that the machine can run the VM node and finds
// what it boots.
func (r *resolved) resolveVMNode() error {
	k, qemu, err := findVMNodeParts(r.binDir)
	if err != nil {
		return fmt.Errorf("Options.VMNode: %w", err)
	}
	r.vmKernel, r.qemu = k, qemu
	return nil
}

// CanRunVMNode says why this machine cannot run the VM node with the
// binaries under binDir (empty: as Up finds them), or nil when it can.
func CanRunVMNode(binDir string) error {
	dir, err := findBinDir(binDir)
	if err != nil {
		return err
	}
	_, _, err = findVMNodeParts(dir)
	return err
}

// findVMNodeParts finds the VM node's kernel and QEMU, and checks the
// tools and binaries its disk is built from.
func findVMNodeParts(binDir string) (vmKernel, string, error) {
	k, err := findVMKernel(binDir)
	if err != nil {
		return k, "", err
	}
	qemu, err := exec.LookPath(qemuBinary)
	if err != nil {
		return k, "", fmt.Errorf("no %s (run 'make deps': hack/apt.sh installs qemu-system-x86)", qemuBinary)
	}
	for _, tool := range []string{mkfsBinary, "ldd", "cp"} {
		if _, err := exec.LookPath(tool); err != nil {
			return k, "", fmt.Errorf("no %s on PATH (run 'make deps': hack/apt.sh)", tool)
		}
	}
	for _, p := range append([]string{busyboxBinary, "/dev/net/tun"}, vmGuestBinaries...) {
		if _, err := os.Stat(p); err != nil {
			return k, "", fmt.Errorf("%w (run 'make deps')", err)
		}
	}
	return k, qemu, nil
}

// startVMNode waits for the disk, makes the tap, boots the guest and
// waits for its node to be Ready. A guest that panics first (a lockup,
// VMKernelArgs) is booted again, up to VMBoots boots within the wait; each
// boot's console stays in logs/vm.log.
func (r *resolved) startVMNode(ctx context.Context, disk func() error, launch func(string) error,
	waitFor func(name, what string, timeout time.Duration, check func(context.Context) error) error) error {
	if err := disk(); err != nil {
		return fmt.Errorf("Options.VMNode: %w", err)
	}
	// Recorded first: a tap made but not configured is still Down's.
	if err := os.WriteFile(r.l.marker(markerVMTap), nil, 0o644); err != nil {
		return err
	}
	if err := createVMTap(); err != nil {
		return err
	}
	ready := func(ctx context.Context) error {
		ready, msg := nodeReady(ctx, r.l, VMNodeName)
		if !ready {
			return errors.New(msg)
		}
		return nil
	}
	console := r.l.logFile(vmComponent)
	deadline := time.Now().Add(max(r.timeout, VMNodeTimeout))
	for boot := 1; ; boot++ {
		from := fileSize(console)
		if err := launch(vmComponent); err != nil {
			return err
		}
		err := waitFor(vmComponent, "VM node "+VMNodeName+" Ready", time.Until(deadline), ready)
		if err == nil || !errors.Is(err, errExited) || boot == VMBoots {
			return err
		}
		why, panicked := guestPanic(console, from)
		if !panicked {
			return err
		}
		r.Log.Warn("the VM node's guest panicked before its node was Ready; booting it again",
			"panic", why, "boot", boot+1, "of", VMBoots, "console", console)
	}
}

// fileSize is path's size, 0 when it cannot be read.
func fileSize(path string) int64 {
	st, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return st.Size()
}

// panicMarker is how the kernel's console says it panicked.
const panicMarker = "Kernel panic - not syncing: "

// guestPanic reads the guest's console from offset on (one boot's) and
// returns the reason of the last kernel panic it shows.
func guestPanic(console string, offset int64) (string, bool) {
	f, err := os.Open(console)
	if err != nil {
		return "", false
	}
	defer f.Close()
	raw, err := io.ReadAll(io.NewSectionReader(f, offset, maxConsoleRead))
	if err != nil {
		return "", false
	}
	i := bytes.LastIndex(raw, []byte(panicMarker))
	if i < 0 {
		return "", false
	}
	why, _, _ := bytes.Cut(raw[i+len(panicMarker):], []byte("\n"))
	return strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(string(why)), "]---")), true
}

// maxConsoleRead bounds what guestPanic reads of one boot's console.
const maxConsoleRead = 16 << 20
