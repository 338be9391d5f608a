package sandbox

// The VM node's boot files (docs/sandbox.md, "A second node"): an ext4
// disk holding the host's containerd, runc, CNI plugins and kubelet with
// their shared libraries, the kernel's modules, the images already
// unpacked, the certificates and configuration; and an initramfs that
// loads the virtio drivers, mounts that disk and switches to it.

import (
	"bufio"
	"bytes"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/kerf-dev/kerf/internal/initramfs"
)

// vmInit is the guest's init once its disk is the root.
//
//go:embed vmnode-init.sh
var vmInit []byte

const (
	busyboxBinary = "/bin/busybox"
	mkfsBinary    = "mkfs.ext4"
	// vmDiskSize is the disk's apparent size; it is sparse, about 500 MB
	// are written.
	vmDiskSize = 3 << 30
)

func (l layout) vmDir() string    { return filepath.Join(l.state, "vm") }
func (l layout) vmDisk() string   { return filepath.Join(l.state, "vm", "disk.img") }
func (l layout) vmInitrd() string { return filepath.Join(l.state, "vm", "initrd.cpio") }

// vmKernel is the guest's kernel as hack/vmkernel.sh unpacks it under
// bin/vm: the image, its release and its modules' tree.
type vmKernel struct {
	image   string
	release string
	modules string // .../lib/modules/<release>
}

// findVMKernel locates the kernel of `make deps` under binDir.
func findVMKernel(binDir string) (vmKernel, error) {
	dir := filepath.Join(binDir, "vm")
	pkg, err := os.ReadFile(filepath.Join(dir, "package"))
	if err != nil {
		return vmKernel{}, fmt.Errorf("the VM node's kernel: %w (run 'make deps': hack/vmkernel.sh)", err)
	}
	k := vmKernel{image: filepath.Join(dir, "vmlinuz"), release: strings.TrimPrefix(strings.TrimSpace(string(pkg)), "linux-image-")}
	k.modules = filepath.Join(dir, "modules", "lib", "modules", k.release)
	for _, p := range []string{k.image, filepath.Join(k.modules, "modules.dep")} {
		if _, err := os.Stat(p); err != nil {
			return vmKernel{}, fmt.Errorf("the VM node's kernel: %w (run 'make deps': hack/vmkernel.sh)", err)
		}
	}
	return k, nil
}

// vmGuestBinaries are the host's binaries the guest runs, at the same
// paths; the kubelet comes from bin/ (r.bins).
var vmGuestBinaries = []string{
	containerdBinary, "/usr/bin/containerd-shim-runc-v2", ctrBinary, runcBinary,
	cniBinDir + "/bridge", cniBinDir + "/host-local", cniBinDir + "/loopback", cniBinDir + "/portmap",
}

// vmInitrdModules are the drivers the initramfs loads, in dependency
// order, to see the disk and the network card.
var vmInitrdModules = []string{
	"drivers/virtio/virtio_ring.ko", "drivers/virtio/virtio.ko", "drivers/virtio/virtio_pci_modern_dev.ko",
	"drivers/virtio/virtio_pci_legacy_dev.ko", "drivers/virtio/virtio_pci.ko", "drivers/block/virtio_blk.ko",
	"net/core/failover.ko", "drivers/net/net_failover.ko", "drivers/net/virtio_net.ko",
}

// buildVMDisk writes the VM node's disk and initramfs under the state
// directory. The staging tree is removed once the disk holds it.
func (r *resolved) buildVMDisk(ctx context.Context) error {
	began := time.Now()
	l := r.l
	stage := filepath.Join(l.vmDir(), "root")
	if err := os.RemoveAll(stage); err != nil {
		return err
	}
	defer os.RemoveAll(stage)
	for _, d := range []string{"bin", "sbin", "usr/bin", "usr/sbin", "usr/local/bin", cniBinDir[1:], "lib64", "etc/kerf",
		"proc", "sys", "dev", "run", "tmp", "var/lib", "var/log", "root", "lib/modules"} {
		if err := os.MkdirAll(filepath.Join(stage, d), 0o755); err != nil {
			return err
		}
	}
	copies := map[string]string{busyboxBinary: "/bin/busybox", r.bins["kubelet"]: "/usr/local/bin/kubelet"}
	for _, b := range vmGuestBinaries {
		copies[b] = b
	}
	libs, err := sharedLibraries(ctx, append(vmGuestBinaries, r.bins["kubelet"])...)
	if err != nil {
		return err
	}
	for _, lib := range libs {
		copies[lib] = lib
	}
	for from, to := range copies {
		if err := copyFile(from, filepath.Join(stage, to)); err != nil {
			return fmt.Errorf("the VM node's disk: %w", err)
		}
	}
	if err := os.Symlink("/bin/busybox", filepath.Join(stage, "sbin", "modprobe")); err != nil {
		return err
	}
	if out, err := exec.CommandContext(ctx, "cp", "-a", r.vmKernel.modules, filepath.Join(stage, "lib", "modules")).CombinedOutput(); err != nil {
		return fmt.Errorf("copy the kernel's modules: %v: %s", err, out)
	}
	if err := preloadImages(ctx, l, filepath.Join(stage, "var", "lib", "containerd"), append([]string{r.PauseImage}, r.Images...)); err != nil {
		return err
	}
	if err := r.writeVMGuestFiles(stage); err != nil {
		return err
	}

	disk := l.vmDisk()
	_ = os.Remove(disk)
	if err := os.WriteFile(disk, nil, 0o600); err != nil {
		return err
	}
	if err := os.Truncate(disk, vmDiskSize); err != nil {
		return err
	}
	if out, err := exec.CommandContext(ctx, mkfsBinary, "-q", "-F", "-L", "kerfvm", "-d", stage, disk).CombinedOutput(); err != nil {
		return fmt.Errorf("%s -d %s: %v: %s", mkfsBinary, stage, err, out)
	}
	if err := r.writeVMInitrd(); err != nil {
		return err
	}
	r.Log.Info("VM node's disk built", "after", seconds(time.Since(began)), "disk", disk)
	return nil
}

// writeVMGuestFiles writes the guest's certificates and configuration
// (WriteVMNodeFiles), its init, and the few files of /etc a busybox
// system wants.
func (r *resolved) writeVMGuestFiles(stage string) error {
	if err := WriteVMNodeFiles(r.StateDir, VMNodeName, stage); err != nil {
		return err
	}
	machineID := make([]byte, 16)
	if f, err := os.Open("/dev/urandom"); err == nil {
		_, _ = f.Read(machineID)
		_ = f.Close()
	}
	files := map[string]string{
		"etc/hosts":       "127.0.0.1 localhost\n" + VMNodeIP + " " + VMNodeName + "\n",
		"etc/resolv.conf": "nameserver " + VMHostIP + "\n",
		"etc/passwd":      "root:x:0:0:root:/root:/bin/sh\n",
		"etc/group":       "root:x:0:\n",
		"etc/machine-id":  fmt.Sprintf("%x\n", machineID),
		"etc/os-release":  fmt.Sprintf("PRETTY_NAME=\"Kerf sandbox VM node (busybox, Debian %s kernel)\"\nID=kerf-vmnode\n", r.vmKernel.release),
		"etc/kerf/env": fmt.Sprintf("NODE=%s\nGUEST_IP=%s\nHOST_IP=%s\nLINK_PREFIX=%d\nKUBELET_ARGS=%q\n",
			VMNodeName, VMNodeIP, VMHostIP, VMLinkPrefix, strings.Join(vmKubeletArgs(VMNodeName), " ")),
		"sbin/init2": string(vmInit),
	}
	if os.Getenv(VMDebugShellEnv) == "1" {
		files["etc/kerf/debug-shell"] = ""
	}
	if os.Getenv(VMPanicOnceEnv) == "1" {
		files["etc/kerf/panic-once"] = ""
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(stage, name), []byte(content), 0o755); err != nil {
			return err
		}
	}
	return nil
}

// writeVMInitrd writes the initramfs: busybox, the virtio drivers and an
// init that loads them, mounts the disk and switches to it.
func (r *resolved) writeVMInitrd() error {
	bb, err := os.ReadFile(busyboxBinary)
	if err != nil {
		return err
	}
	var a initramfs.Archive
	for _, d := range []string{"bin", "proc", "sys", "dev", "newroot", "mods"} {
		a.Dir(d)
	}
	a.File("bin/busybox", 0o755, bb)
	var names []string
	for _, m := range vmInitrdModules {
		raw, err := os.ReadFile(filepath.Join(r.vmKernel.modules, "kernel", m))
		if err != nil {
			return fmt.Errorf("the VM node's initramfs: %w", err)
		}
		name := filepath.Base(m)
		a.File("mods/"+name, 0o644, raw)
		names = append(names, name)
	}
	a.File("init", 0o755, []byte(`#!/bin/busybox sh
/bin/busybox --install -s /bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
for m in `+strings.Join(names, " ")+`; do
	insmod /mods/$m || echo "insmod $m failed"
done
for i in $(seq 100); do [ -b /dev/vda ] && break; sleep 0.1; done
mount -t ext4 /dev/vda /newroot || { echo "cannot mount /dev/vda"; poweroff -f; }
echo "vmnode-mark root-mounted $(cut -d' ' -f1 /proc/uptime)"
mount --move /dev /newroot/dev
umount /proc /sys
exec switch_root /newroot /sbin/init2
`))
	return os.WriteFile(r.l.vmInitrd(), a.Bytes(), 0o644)
}

// sharedLibraries lists the shared libraries the binaries load, as ldd
// resolves them, and the dynamic loader.
func sharedLibraries(ctx context.Context, binaries ...string) ([]string, error) {
	seen := map[string]bool{}
	for _, b := range binaries {
		out, err := exec.CommandContext(ctx, "ldd", b).Output()
		if err != nil {
			if bytes.Contains(out, []byte("not a dynamic executable")) {
				continue
			}
			var exit *exec.ExitError
			if errors.As(err, &exit) && bytes.Contains(exit.Stderr, []byte("not a dynamic executable")) {
				continue
			}
			return nil, fmt.Errorf("ldd %s: %w", b, err)
		}
		sc := bufio.NewScanner(bytes.NewReader(out))
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			switch {
			case len(f) >= 3 && f[1] == "=>" && strings.HasPrefix(f[2], "/"):
				seen[f[2]] = true
			case len(f) >= 1 && strings.HasPrefix(f[0], "/"):
				seen[f[0]] = true // the loader, named by its path
			}
		}
	}
	libs := make([]string, 0, len(seen))
	for lib := range seen {
		libs = append(libs, lib)
	}
	return libs, nil
}

// copyFile copies from (following symlinks) to a new file with its mode.
func copyFile(from, to string) error {
	raw, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	st, err := os.Stat(from)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
		return err
	}
	return os.WriteFile(to, raw, st.Mode().Perm())
}

// preloadImages unpacks the image archives into root, the guest's
// containerd root, on the host: a containerd of its own (sockets in the
// VM directory, no CRI) imports them, and its content store, metadata and
// overlayfs snapshots are plain files the guest's containerd reads as its
// own. Importing in the guest, under TCG, took 6 s per 9 MB image.
func preloadImages(ctx context.Context, l layout, root string, archives []string) error {
	dir := filepath.Join(l.vmDir(), "preload")
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	sock := filepath.Join(dir, "containerd.sock")
	config := fmt.Sprintf(`version = 2
root = %q
state = %q
disabled_plugins = ["io.containerd.grpc.v1.cri", "io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper"]
[grpc]
  address = %q
[ttrpc]
  address = %q
[debug]
  address = %q
`, root, filepath.Join(dir, "state"), sock, sock+".ttrpc", filepath.Join(dir, "debug.sock"))
	if err := os.WriteFile(filepath.Join(dir, "config.toml"), []byte(config), 0o600); err != nil {
		return err
	}
	logf, err := os.Create(filepath.Join(l.logs(), "vm-preload-containerd.log"))
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.Command(containerdBinary, "--config", filepath.Join(dir, "config.toml"))
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start a containerd to unpack the VM node's images: %w", err)
	}
	defer func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}()
	deadline := time.Now().Add(time.Minute)
	for exec.CommandContext(ctx, ctrBinary, "--address", sock, "version").Run() != nil {
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("the containerd unpacking the VM node's images did not serve within a minute (log %s)", logf.Name())
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, a := range archives {
		if err := importImage(ctx, sock, a); err != nil {
			return fmt.Errorf("the VM node's images: %w", err)
		}
	}
	return nil
}
