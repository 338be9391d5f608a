// Package vmtest runs a package's own tests again inside a virtual machine
// on another kernel: Debian bookworm's 6.1 cloud kernel, with cgroup v2
// and every controller, BTF and no lockdown (hack/vmkernel.sh fetches it
// into bin/vm/, `make deps` runs it). The host's kernel here has its
// controllers on cgroup v1; the node a user runs has them on v2.
//
// Run builds the calling package's test binary, statically, packs it with
// busybox into an initramfs whose init mounts proc, sysfs, devtmpfs,
// tracefs and the cgroup2 hierarchy at /sys/fs/cgroup, runs the binary
// with -test.v and the tests asked for, and powers off. QEMU boots it
// under TCG (about 11 times slower than the host for compute: timeouts
// are generous), or KVM with KVMEnv. The guest's console is the test's log,
// and the guest's go test verdict is the host test's.
package vmtest

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/kerf-dev/kerf/internal/initramfs"
	"github.com/kerf-dev/kerf/internal/kube"
	"github.com/kerf-dev/kerf/internal/sandbox"
	"github.com/kerf-dev/kerf/test/controlplane"
)

// KVMEnv, set to "1", boots the VM with KVM. TCG is the default: this
// project's machines have a /dev/kvm (nested) on which QEMU fails to set
// the host CPU's MSRs, and with another CPU model the boot hangs.
const KVMEnv = "KERF_VM_KVM"

// GuestEnv is set to "1" in the guest: a test that runs in the VM only
// (InGuest) or must not run there reads it.
const GuestEnv = "KERF_VM_GUEST"

// Timeout bounds one boot, from QEMU's start to the guest's power-off.
const Timeout = 10 * time.Minute

// InGuest reports whether the test runs inside the VM.
func InGuest() bool { return os.Getenv(GuestEnv) == "1" }

// busybox is Debian's busybox-static (hack/apt.sh), the guest's shell and
// tools.
const busybox = "/bin/busybox"

// exitMarker precedes the guest test binary's exit status on the console.
const exitMarker = "kerf-vm-exit "

// Run runs the tests of the calling package that match run (a -test.run
// pattern) inside the VM and fails t when they fail there, or when the VM
// cannot run; without the kernel, QEMU or busybox it skips with the
// reason, and fails instead under make test (controlplane.Required).
func Run(t *testing.T, run string) {
	t.Helper()
	if InGuest() {
		t.Skip("already inside the VM")
	}
	kernel, qemu := need(t)
	dir := t.TempDir()
	bin := filepath.Join(dir, "pkg.test")
	build := exec.Command("go", "test", "-c", "-o", bin, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the test binary for the VM: %v\n%s", err, out)
	}
	initrd := filepath.Join(dir, "initrd.cpio")
	if err := writeInitramfs(initrd, bin, run); err != nil {
		t.Fatal(err)
	}
	args := []string{
		"-kernel", kernel, "-initrd", initrd, "-append", sandbox.VMKernelArgs,
		"-m", "1024", "-smp", "2", "-nographic", "-no-reboot", "-nodefaults", "-serial", "stdio",
	}
	if os.Getenv(KVMEnv) == "1" {
		args = append(args, "-enable-kvm", "-cpu", "host")
	} else {
		args = append(args, "-cpu", "max")
	}
	for boot := 1; ; boot++ {
		status, console := bootOnce(t, qemu, args)
		if bootAgain(status, console) && boot < lockupBoots {
			t.Logf("the VM's kernel locked up (a soft lockup under TCG); booting it again (boot %d of %d)", boot+1, lockupBoots)
			continue
		}
		switch {
		case status == "":
			t.Fatal("the VM ended without the tests' exit status (its console is above)")
		case status != "0":
			t.Fatalf("the tests failed in the VM (exit status %s)", status)
		}
		if !passed.Match(console) {
			t.Fatalf("no test passed in the VM: does -test.run %q match this package's tests?", run)
		}
		return
	}
}

// lockupBoots is how many times Run boots the VM when its kernel panics on
// a soft lockup (sandbox.VMKernelArgs) before the tests' exit status: the
// lockup is the guest's under TCG on a busy machine, not the tests'. Any
// other panic, or a test that failed before the lockup, fails the test at
// once.
const lockupBoots = 2

// bootAgain reports whether a boot that printed status and console ended
// in a soft lockup's panic before any test failed or the tests ended.
func bootAgain(status string, console []byte) bool {
	return status == "" && lockedUp.Match(console) && !failed.Match(console)
}

// lockedUp matches the panic of a soft lockup on the console.
var lockedUp = regexp.MustCompile(`Kernel panic - not syncing: softlockup`)

// failed matches a test that failed in -test.v output: a boot that locked
// up after one is not booted again.
var failed = regexp.MustCompile(`(?m)^\s*--- FAIL: `)

// bootOnce runs QEMU with args until the guest powers off, or Timeout,
// and returns the tests' exit status ("" when none was printed) and the
// console.
func bootOnce(t *testing.T, qemu string, args []string) (string, []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), Timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, qemu, args...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", qemu, err)
	}
	status, console := follow(t, out)
	waitErr := cmd.Wait()
	t.Logf("VM: %v from boot to power-off (QEMU: %v)", time.Since(start).Round(time.Millisecond), waitErr)
	if ctx.Err() != nil {
		t.Fatalf("the VM did not power off within %v", Timeout)
	}
	return status, console
}

// escapes matches the terminal control sequences the firmware prints.
var escapes = regexp.MustCompile(`\x1b(\[[0-9;?]*[A-Za-z]|c)`)

// passed matches a test that passed in -test.v output.
var passed = regexp.MustCompile(`(?m)^\s*--- PASS: `)

// follow logs the console line by line and returns the tests' exit
// status (from exitMarker) and the whole console.
func follow(t *testing.T, r io.Reader) (string, []byte) {
	var status string
	var all bytes.Buffer
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := escapes.ReplaceAllString(strings.TrimRight(sc.Text(), "\r"), "")
		all.WriteString(line + "\n")
		if s, ok := strings.CutPrefix(line, exitMarker); ok {
			status = strings.TrimSpace(s)
		}
		t.Log("vm: " + line)
	}
	return status, all.Bytes()
}

// need returns the kernel and QEMU, or skips (fails under make test)
// saying what is missing.
func need(t *testing.T) (kernel, qemu string) {
	t.Helper()
	missing := func(format string, args ...any) {
		t.Helper()
		msg := fmt.Sprintf(format, args...)
		if controlplane.Required() {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	root, err := kube.RepoRoot()
	if err != nil {
		missing("the VM's kernel: %v", err)
	}
	kernel = filepath.Join(root, "bin", "vm", "vmlinuz")
	if _, err := os.Stat(kernel); err != nil {
		missing("no VM kernel (%v): run 'make deps' (hack/vmkernel.sh)", err)
	}
	if qemu, err = exec.LookPath("qemu-system-x86_64"); err != nil {
		missing("no qemu-system-x86_64: run 'make deps' (hack/apt.sh installs qemu-system-x86)")
	}
	if _, err := os.Stat(busybox); err != nil {
		missing("no %s: run 'make deps' (hack/apt.sh installs busybox-static)", busybox)
	}
	return kernel, qemu
}

// initScript is the guest's /init: mount what the tests read, run the test
// binary, print its exit status, power off.
const initScript = `#!/bin/busybox sh
/bin/busybox --install -s /bin
mkdir -p /proc /sys /dev /tmp
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mount -t tmpfs tmpfs /tmp
mount -t tracefs tracefs /sys/kernel/tracing 2>/dev/null
mount -t cgroup2 cgroup2 /sys/fs/cgroup
echo "kernel $(uname -r), cgroup controllers: $(cat /sys/fs/cgroup/cgroup.controllers)"
cd /tmp
HOME=/tmp PATH=/bin ` + GuestEnv + `=1 /pkg.test -test.v -test.count=1 -test.timeout=8m -test.run "$(cat /run-pattern)"
echo "` + exitMarker + `$?"
poweroff -f
`

// writeInitramfs writes a newc cpio archive (the kernel's initramfs
// format, uncompressed) with busybox, /init, the test binary and the run
// pattern.
func writeInitramfs(path, testBinary, run string) error {
	bb, err := os.ReadFile(busybox)
	if err != nil {
		return fmt.Errorf("initramfs: %w", err)
	}
	tb, err := os.ReadFile(testBinary)
	if err != nil {
		return fmt.Errorf("initramfs: %w", err)
	}
	var w initramfs.Archive
	for _, d := range []string{"bin", "sys", "sys/fs", "sys/fs/cgroup", "sys/kernel", "sys/kernel/tracing", "proc", "dev", "tmp"} {
		w.Dir(d)
	}
	w.File("bin/busybox", 0o755, bb)
	w.File("init", 0o755, []byte(initScript))
	w.File("pkg.test", 0o755, tb)
	w.File("run-pattern", 0o644, []byte(run))
	return os.WriteFile(path, w.Bytes(), 0o644)
}
