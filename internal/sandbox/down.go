package sandbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/kerf-dev/kerf/internal/kube"
)

// Down stops exactly what Up started at stateDir and removes every trace
// of it: the components (by PID file, checked to still be theirs), the
// pods' containers and shims, every mount under the state directory and
// on HostPodsAPIDir, the bridge, the KUBE-*/CNI-* iptables chains, the
// kubelet's empty cgroups and the state directory. It is idempotent: with
// nothing up it does nothing and returns nil.
func Down(ctx context.Context, stateDir string, log *slog.Logger) error {
	if !filepath.IsAbs(stateDir) {
		return fmt.Errorf("state dir %q is not an absolute path", stateDir)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	l := layout{state: filepath.Clean(stateDir)}
	if _, err := os.Stat(l.state); errors.Is(err, os.ErrNotExist) {
		log.Info("no sandbox to remove", "stateDir", l.state)
		return nil
	}
	began := time.Now()
	if err := teardown(ctx, l, log, true); err != nil {
		return err
	}
	log.Info("sandbox removed", "took", seconds(time.Since(began)))
	return nil
}

// teardown stops the sandbox at l and undoes what Up did to the machine;
// with removeState it also deletes the state directory (else the logs stay
// for a look after a failed start).
func teardown(ctx context.Context, l layout, log *slog.Logger, removeState bool) error {
	var errs []error
	stop := func(name string) {
		pid := readPID(l, name)
		if pid == 0 {
			return
		}
		if !owned(pid, binaryName(name), l.state) {
			_ = os.Remove(l.pidFile(name))
			return
		}
		log.Info("stopping "+name, "pid", pid)
		if err := terminate(ctx, pid, componentStopTimeout); err != nil {
			errs = append(errs, fmt.Errorf("stop %s: %w", name, err))
			return
		}
		_ = os.Remove(l.pidFile(name))
	}

	// The VM node first (its disk is thrown away with the state), then
	// the host node's agents, so nothing restarts the pods we stop.
	stop(vmComponent)
	if _, err := os.Stat(l.marker(markerVMTap)); err == nil {
		log.Info("deleting the VM node's tap " + VMTap)
		if err := deleteVMTap(); err != nil {
			errs = append(errs, err)
		}
	}
	stop("kube-proxy")
	stop("kubelet")
	if err := stopPods(ctx, l, log); err != nil {
		errs = append(errs, err)
	}
	stop("containerd")
	for _, pid := range shims(l) {
		log.Info("stopping a leftover containerd shim", "pid", pid)
		killChildren(pid)
		if err := terminate(ctx, pid, 2*time.Second); err != nil {
			errs = append(errs, fmt.Errorf("stop shim: %w", err))
		}
	}
	for _, name := range []string{"kube-scheduler", "kube-controller-manager", "kube-apiserver", "etcd"} {
		stop(name)
	}

	log.Info("unmounting", "under", l.state, "and", HostPodsAPIDir)
	if err := unmountAll(l.state, HostPodsAPIDir); err != nil {
		errs = append(errs, err)
	}
	removeContainerLogLinks(l)
	removeHostDirs(l)

	if _, err := os.Stat(l.marker(markerBridge)); err == nil {
		log.Info("deleting bridge " + BridgeName)
		if err := deleteBridge(); err != nil {
			errs = append(errs, err)
		}
	}
	log.Info("removing KUBE-* and CNI-* iptables chains")
	if proxy := proxyBinary(l); proxy != "" {
		_ = exec.CommandContext(ctx, proxy, "--cleanup").Run() // its own rules first; the sweep below catches the rest
	}
	if err := removeChains(); err != nil {
		errs = append(errs, err)
	}
	if _, err := os.Stat(l.marker(markerKubepods)); err == nil {
		if err := removeKubepodsCgroups(log); err != nil {
			errs = append(errs, err)
		}
	}

	if removeState {
		if err := os.RemoveAll(l.state); err != nil {
			errs = append(errs, fmt.Errorf("remove %s: %w", l.state, err))
		}
	} else {
		_ = os.Remove(l.marker(markerBridge))
		_ = os.Remove(l.marker(markerKubepods))
		_ = os.Remove(l.marker(markerVMTap))
	}
	return errors.Join(errs...)
}

// stopPods kills every container of the sandbox: the processes whose
// parent is one of its containerd shims (each container's init; killing
// it ends its PID namespace), then asks containerd, while it runs, to
// delete the tasks so the shims exit cleanly.
func stopPods(ctx context.Context, l layout, log *slog.Logger) error {
	sh := shims(l)
	if len(sh) == 0 {
		return nil
	}
	log.Info("stopping pod containers", "shims", len(sh))
	for _, pid := range sh {
		killChildren(pid)
	}
	if !alive(readPID(l, "containerd")) {
		return nil
	}
	sock := l.containerdSocket()
	out, err := exec.CommandContext(ctx, ctrBinary, "-n", "k8s.io", "--address", sock, "tasks", "ls", "-q").Output()
	if err != nil {
		return nil // containerd not answering: the shims are killed afterwards
	}
	ids := strings.Fields(string(out))
	if len(ids) > 0 {
		args := append([]string{"-n", "k8s.io", "--address", sock, "tasks", "delete", "--force"}, ids...)
		_ = exec.CommandContext(ctx, ctrBinary, args...).Run()
	}
	return nil
}

// killChildren SIGKILLs every child of pid.
func killChildren(pid int) {
	for _, p := range pids() {
		if parentPID(p) == pid {
			_ = syscall.Kill(p, syscall.SIGKILL)
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		left := false
		for _, p := range pids() {
			if parentPID(p) == pid && alive(p) {
				left = true
			}
		}
		if !left {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// hostPaths are the directories outside the state directory that the
// sandbox makes (the kubelet and the containerd shims make some whatever
// their settings); Up records those that did not exist before.
var hostPaths = []string{"/var/lib/kubelet", HostPodsAPIDir, "/var/log/containers", "/run/containerd"}

// recordHostPaths writes down which of hostPaths do not exist yet.
func recordHostPaths(l layout) error {
	var missing []string
	for _, p := range hostPaths {
		if _, err := os.Stat(p); errors.Is(err, os.ErrNotExist) {
			missing = append(missing, p)
		}
	}
	return os.WriteFile(l.marker(markerHostPaths), []byte(strings.Join(missing, "\n")), 0o644)
}

// removeHostDirs removes the directories Up created outside the state
// directory, as recorded, once unmounted: only empty directories go, so
// anything else that came to live there stays.
func removeHostDirs(l layout) {
	raw, err := os.ReadFile(l.marker(markerHostPaths))
	if err != nil {
		return
	}
	paths := strings.Fields(string(raw))
	sort.Slice(paths, func(i, j int) bool { return len(paths[i]) > len(paths[j]) })
	for _, p := range paths {
		if p == "/var/lib/kubelet" {
			// The kubelet always makes device-plugins/ (its socket and a
			// checkpoint) there, whatever its root dir.
			_ = os.RemoveAll(filepath.Join(p, "device-plugins"))
		}
		removeEmptyDirs(p)
	}
}

// removeEmptyDirs removes dir and the directories under it, deepest first,
// where they are empty.
func removeEmptyDirs(dir string) {
	var dirs []string
	_ = filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, path)
		}
		return nil
	})
	sort.Slice(dirs, func(i, j int) bool { return len(dirs[i]) > len(dirs[j]) })
	for _, d := range dirs {
		_ = syscall.Rmdir(d)
	}
}

// proxyBinary is the kube-proxy binary Up ran, from the bin dir it
// recorded; empty when unknown.
func proxyBinary(l layout) string {
	raw, err := os.ReadFile(l.marker(markerBinDir))
	if err != nil {
		return ""
	}
	p := filepath.Join(kube.KubernetesDir(strings.TrimSpace(string(raw))), "kube-proxy")
	if _, err := os.Stat(p); err != nil {
		return ""
	}
	return p
}
