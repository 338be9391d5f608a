// Command kerf-pause is the pod sandbox's pause process for Kerf's local
// sandbox (image kerf.local/pause:1): it holds the pod's namespaces open,
// reaps zombies (it is PID 1 when the pod shares its PID namespace) and
// exits 0 on SIGTERM or SIGINT, like Kubernetes' pause.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	if len(os.Args) > 1 {
		fmt.Fprintln(os.Stderr, "Usage: kerf-pause (no flags): blocks until SIGTERM or SIGINT, reaping zombies")
		os.Exit(2)
	}
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	for sig := range sigs {
		if sig == syscall.SIGCHLD {
			reap()
			continue
		}
		os.Exit(0)
	}
}

// reap collects every child that has exited; SIGCHLDs coalesce, so one
// signal may stand for several.
func reap() {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if pid <= 0 || err != nil {
			return
		}
	}
}
