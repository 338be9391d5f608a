package sandbox

import (
	"bufio"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// mountsUnder returns the mount points at or under any of dirs, deepest
// first, read from /proc/self/mountinfo (field 5, octal-escaped).
func mountsUnder(dirs ...string) ([]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		mp := unescapeMountinfo(fields[4])
		for _, d := range dirs {
			if mp == d || strings.HasPrefix(mp, d+"/") {
				out = append(out, mp)
				break
			}
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		return strings.Count(out[i], "/") > strings.Count(out[j], "/")
	})
	return out, sc.Err()
}

// unescapeMountinfo undoes mountinfo's octal escapes (\040 for a space).
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// unmountAll unmounts everything at or under dirs, deepest first, until
// nothing is left (mounts can be stacked on one point).
func unmountAll(dirs ...string) error {
	for round := 0; round < 20; round++ {
		mps, err := mountsUnder(dirs...)
		if err != nil {
			return fmt.Errorf("read /proc/self/mountinfo: %w", err)
		}
		if len(mps) == 0 {
			return nil
		}
		for _, mp := range mps {
			if err := syscall.Unmount(mp, 0); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOENT) {
				// Busy: detach it, the kernel frees it once unused.
				_ = syscall.Unmount(mp, syscall.MNT_DETACH)
			}
		}
	}
	mps, _ := mountsUnder(dirs...)
	if len(mps) > 0 {
		return fmt.Errorf("still mounted after 20 rounds: %s", strings.Join(mps, ", "))
	}
	return nil
}

// bindMount makes dir's contents visible at target too.
func bindMount(dir, target string) error {
	if err := syscall.Mount(dir, target, "", syscall.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind-mount %s on %s: %w", dir, target, err)
	}
	return nil
}

// linkExists reports whether the network interface name exists.
func linkExists(name string) bool {
	_, err := os.Stat(filepath.Join("/sys/class/net", name))
	return err == nil
}

// createBridge creates the pod bridge with the node's address, so the
// apiserver and kubelet can listen on it before the first pod exists; the
// CNI bridge plugin finds it and uses it as is.
func createBridge() error {
	if linkExists(BridgeName) {
		return fmt.Errorf("network interface %s already exists (another sandbox? run 'kerf-sandbox down')", BridgeName)
	}
	for _, args := range [][]string{
		{"link", "add", BridgeName, "type", "bridge"},
		{"addr", "add", NodeIP + "/24", "dev", BridgeName},
		{"link", "set", BridgeName, "up"},
	} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
		}
	}
	return nil
}

// deleteBridge removes the pod bridge; the pods' veths went with their
// network namespaces.
func deleteBridge() error {
	if !linkExists(BridgeName) {
		return nil
	}
	if out, err := exec.Command("ip", "link", "del", BridgeName).CombinedOutput(); err != nil {
		return fmt.Errorf("ip link del %s: %v: %s", BridgeName, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// chainOwned reports whether an iptables chain belongs to Kubernetes
// (kube-proxy, kubelet) or to the CNI plugins.
func chainOwned(chain string) bool {
	return strings.HasPrefix(chain, "KUBE-") || strings.HasPrefix(chain, "CNI-")
}

// removeChains deletes the KUBE-* and CNI-* chains and every rule that
// jumps to them, in each table, for iptables and ip6tables. kube-proxy
// --cleanup removes most first; this catches the kubelet's and CNI's.
func removeChains() error {
	var errs []error
	for _, bin := range []string{"iptables", "ip6tables"} {
		if _, err := exec.LookPath(bin); err != nil {
			continue
		}
		for _, table := range []string{"filter", "nat", "mangle", "raw"} {
			if err := removeChainsIn(bin, table); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

func removeChainsIn(bin, table string) error {
	out, err := exec.Command(bin, "-w", "5", "-t", table, "-S").Output()
	if err != nil {
		return nil // table not available here
	}
	var chains []string
	var jumps [][]string
	for _, line := range strings.Split(string(out), "\n") {
		args := splitRule(line)
		if len(args) < 2 {
			continue
		}
		switch args[0] {
		case "-N":
			if chainOwned(args[1]) {
				chains = append(chains, args[1])
			}
		case "-A":
			if chainOwned(args[1]) {
				continue // flushed with its chain
			}
			for i := 2; i+1 < len(args); i++ {
				if (args[i] == "-j" || args[i] == "-g") && chainOwned(args[i+1]) {
					jumps = append(jumps, args[1:])
					break
				}
			}
		}
	}
	var errs []error
	for _, rule := range jumps {
		cmd := append([]string{"-w", "5", "-t", table, "-D"}, rule...)
		if out, err := exec.Command(bin, cmd...).CombinedOutput(); err != nil {
			errs = append(errs, fmt.Errorf("%s %s: %v: %s", bin, strings.Join(cmd, " "), err, strings.TrimSpace(string(out))))
		}
	}
	for _, c := range chains {
		_ = exec.Command(bin, "-w", "5", "-t", table, "-F", c).Run()
	}
	for _, c := range chains {
		if out, err := exec.Command(bin, "-w", "5", "-t", table, "-X", c).CombinedOutput(); err != nil {
			errs = append(errs, fmt.Errorf("%s -t %s -X %s: %v: %s", bin, table, c, err, strings.TrimSpace(string(out))))
		}
	}
	return errors.Join(errs...)
}

// splitRule splits one line of `iptables -S` into arguments, honouring
// the double quotes it puts around comments.
func splitRule(line string) []string {
	var args []string
	var cur strings.Builder
	inQuote, have := false, false
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case c == '\\' && inQuote && i+1 < len(line):
			i++
			cur.WriteByte(line[i])
		case c == '"':
			inQuote = !inQuote
			have = true
		case c == ' ' && !inQuote:
			if have {
				args = append(args, cur.String())
				cur.Reset()
				have = false
			}
		default:
			cur.WriteByte(c)
			have = true
		}
	}
	if have {
		args = append(args, cur.String())
	}
	return args
}

// removeKubepodsCgroups removes the kubelet's cgroup tree (kubepods under
// each cgroup v1 controller), deepest first. A process still in it is a
// container of the sandbox's whose shim is gone (killed from outside, so
// nothing stopped it): it is killed first. A cgroup that still holds a
// process then stays and is reported.
func removeKubepodsCgroups(log *slog.Logger) error {
	roots, _ := filepath.Glob("/sys/fs/cgroup/*/kubepods")
	if st, err := os.Stat("/sys/fs/cgroup/kubepods"); err == nil && st.IsDir() {
		roots = append(roots, "/sys/fs/cgroup/kubepods") // cgroup v2
	}
	return removeCgroupTrees(log, roots)
}

// removeCgroupTrees removes the cgroup trees at roots, deepest first,
// killing the processes left in them first.
func removeCgroupTrees(log *slog.Logger, roots []string) error {
	var errs []error
	for _, root := range roots {
		var dirs []string
		_ = filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, path)
			}
			return nil
		})
		sort.SliceStable(dirs, func(i, j int) bool { return len(dirs[i]) > len(dirs[j]) })
		killed := 0
		for _, d := range dirs {
			killed += killCgroupTasks(d)
		}
		if killed > 0 {
			log.Warn("killed processes left in the kubelet's cgroups (their containerd shims were gone)", "processes", killed, "under", root)
		}
		for _, d := range dirs {
			var err error
			for try := 0; try < 50; try++ { // the kernel frees a cgroup shortly after its last task
				if try >= 10 && len(cgroupTasks(d)) > 0 {
					break // a task that outlived SIGKILL for 200 ms: report it, do not wait a second per cgroup
				}
				if err = syscall.Rmdir(d); err == nil || errors.Is(err, syscall.ENOENT) {
					err = nil
					break
				}
				time.Sleep(20 * time.Millisecond)
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("remove cgroup %s: %w", d, err))
			}
		}
	}
	return errors.Join(errs...)
}

// cgroupTasks returns the process IDs in cgroup directory d.
func cgroupTasks(d string) []int {
	b, err := os.ReadFile(filepath.Join(d, "cgroup.procs"))
	if err != nil {
		return nil
	}
	var pids []int
	for _, f := range strings.Fields(string(b)) {
		if pid, err := strconv.Atoi(f); err == nil && pid > 0 {
			pids = append(pids, pid)
		}
	}
	return pids
}

// killCgroupTasks sends SIGKILL to every process in cgroup directory d and
// returns how many it sent it to.
func killCgroupTasks(d string) int {
	n := 0
	for _, pid := range cgroupTasks(d) {
		if syscall.Kill(pid, syscall.SIGKILL) == nil {
			n++
		}
	}
	return n
}

// removeContainerLogLinks removes the kubelet's symlinks in
// /var/log/containers that point into the sandbox's pod logs.
func removeContainerLogLinks(l layout) {
	entries, err := os.ReadDir("/var/log/containers")
	if err != nil {
		return
	}
	for _, e := range entries {
		p := filepath.Join("/var/log/containers", e.Name())
		if target, err := os.Readlink(p); err == nil && strings.HasPrefix(target, l.podLogs()+"/") {
			_ = os.Remove(p)
		}
	}
}
