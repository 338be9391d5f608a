package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/kerf-dev/kerf/internal/sandbox"
)

// parse parses a subcommand's flags and returns the exit code to leave
// with, or -1 to go on.
func parse(fs *flag.FlagSet, args []string) int {
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "%s: unexpected argument %q\n", fs.Name(), fs.Arg(0))
		return 2
	}
	return -1
}

// absStateDir makes --state-dir absolute, or reports it.
func absStateDir(dir string) (string, bool) {
	abs, err := filepath.Abs(dir)
	if err != nil || dir == "" {
		fmt.Fprintf(os.Stderr, "--state-dir %q: not a usable path\n", dir)
		return "", false
	}
	return abs, true
}

func runUp(args []string) int {
	fs := flag.NewFlagSet("kerf-sandbox up", flag.ContinueOnError)
	stateDir := fs.String("state-dir", sandbox.DefaultStateDir, "directory for all of the sandbox's state (on a real disk, not overlayfs or tmpfs)")
	node := fs.String("node-name", sandbox.DefaultNodeName, "name the node registers with")
	pause := fs.String("pause-image", "", "image archive tagged "+sandbox.PauseImageRef+" to import before the kubelet starts (required on a fresh sandbox)")
	binDir := fs.String("bin-dir", "", "directory with the binaries of 'make deps' (default: the repository's bin/)")
	nodes := fs.Int("nodes", 1, "1, or 2 for a second node "+sandbox.VMNodeName+" in a VM with a cgroup v2 kernel (tainted "+sandbox.VMNodeTaint+"=true:NoSchedule)")
	var images stringList
	fs.Var(&images, "image", "an image archive every node gets (repeat the flag); the VM node has only these and the pause image")
	if code := parse(fs, args); code >= 0 {
		return code
	}
	if *nodes != 1 && *nodes != 2 {
		fmt.Fprintf(os.Stderr, "kerf-sandbox up: --nodes %d: the sandbox has 1 node, or 2 with the VM node\n", *nodes)
		return 2
	}
	dir, ok := absStateDir(*stateDir)
	if !ok {
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	c, err := sandbox.Up(ctx, sandbox.Options{StateDir: dir, NodeName: *node, PauseImage: *pause, BinDir: *binDir, Log: log,
		VMNode: *nodes == 2, Images: images})
	if err != nil {
		fmt.Fprintf(os.Stderr, "kerf-sandbox up: %v\n", err)
		return 1
	}
	fmt.Printf(`
Kerf sandbox: node %s is Ready (apiserver %s)

  export KUBECONFIG=%s
  kubectl get nodes                 # kubectl: bin/k8s-<version>/kubectl

Pods API socket for the agent: %s
Stop it and remove everything: kerf-sandbox down --state-dir %s
`, c.NodeName, sandbox.APIServerURL, c.Kubeconfig, c.HostPodsAPISocket, c.StateDir)
	if c.VMNode != "" {
		fmt.Printf("Second node %s (cgroup v2, in QEMU) is Ready: pods run there when they tolerate %s\n", c.VMNode, sandbox.VMNodeTaint)
	}
	return 0
}

// stringList is a flag that may be given more than once.
type stringList []string

func (s *stringList) String() string { return strings.Join(*s, ",") }

func (s *stringList) Set(v string) error {
	*s = append(*s, v)
	return nil
}

// stateDirOnly parses the flags of a command whose only flag is
// --state-dir and returns the directory, or the exit code to leave with.
func stateDirOnly(name string, args []string) (string, int) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	stateDir := fs.String("state-dir", sandbox.DefaultStateDir, "the sandbox's state directory")
	if code := parse(fs, args); code >= 0 {
		return "", code
	}
	dir, ok := absStateDir(*stateDir)
	if !ok {
		return "", 2
	}
	return dir, -1
}

func runDown(args []string) int {
	dir, code := stateDirOnly("kerf-sandbox down", args)
	if code >= 0 {
		return code
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if err := sandbox.Down(context.Background(), dir, log); err != nil {
		fmt.Fprintf(os.Stderr, "kerf-sandbox down: %v\n", err)
		return 1
	}
	return 0
}

func runStatus(args []string) int {
	dir, code := stateDirOnly("kerf-sandbox status", args)
	if code >= 0 {
		return code
	}
	st, err := sandbox.Status(context.Background(), dir)
	if err != nil {
		fmt.Fprintf(os.Stderr, "kerf-sandbox status: %v\n", err)
		return 1
	}
	fmt.Print(st)
	if !st.Healthy() {
		return 1
	}
	return 0
}
