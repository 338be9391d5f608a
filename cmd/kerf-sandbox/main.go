// Command kerf-sandbox runs Kerf's local sandbox: a real one-node
// Kubernetes cluster on this machine (DESIGN.md section 9; `up`, `down`,
// `status`, logic in internal/sandbox), or just a real control plane in the
// foreground until Ctrl-C (`controlplane`).
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/kerf-dev/kerf/test/controlplane"
)

func usage() {
	fmt.Fprint(os.Stderr, `Usage: kerf-sandbox <command> [flags]

Commands:
  demo           up, install Kerf, run three real rollbacks, narrate them; down on Ctrl-C
  up             start a real one-node cluster (or reuse the healthy one running)
  down           stop it and remove every trace of it
  status         show each component, the node and the kubeconfig
  controlplane   run etcd and kube-apiserver on loopback until Ctrl-C

Exit codes: 0 ok, 1 failure, 2 usage.

Run 'kerf-sandbox <command> -h' for a command's flags.
`)
}

func main() {
	if len(os.Args) < 2 {
		usage()
		os.Exit(2)
	}
	switch os.Args[1] {
	case "controlplane":
		os.Exit(runControlPlane(os.Args[2:]))
	case "up":
		os.Exit(runUp(os.Args[2:]))
	case "demo":
		os.Exit(runDemo(os.Args[2:]))
	case "down":
		os.Exit(runDown(os.Args[2:]))
	case "status":
		os.Exit(runStatus(os.Args[2:]))
	case "-h", "-help", "--help", "help":
		usage()
	default:
		fmt.Fprintf(os.Stderr, "kerf-sandbox: unknown command %q\n\n", os.Args[1])
		usage()
		os.Exit(2)
	}
}

func runControlPlane(args []string) int {
	fs := flag.NewFlagSet("kerf-sandbox controlplane", flag.ContinueOnError)
	kubeconfig := fs.String("kubeconfig", "bin/sandbox/kubeconfig", "where to write the administrator's kubeconfig (removed on exit)")
	binDir := fs.String("bin-dir", "", "directory with the binaries of 'make deps' (default: the repository's bin/)")
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return 0
		}
		return 2
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	log.Info("starting etcd and kube-apiserver", "kubernetes", controlplane.KubernetesVersion, "etcd", controlplane.EtcdVersion)
	cp, err := controlplane.Start(controlplane.Options{BinDir: *binDir})
	if err != nil {
		log.Error("control plane did not start", "err", err)
		return 1
	}
	defer func() {
		log.Info("stopping the control plane")
		if err := cp.Stop(); err != nil {
			log.Error("stop control plane", "err", err)
		}
		_ = os.Remove(*kubeconfig)
		log.Info("stopped; everything it created is removed")
	}()

	raw, err := os.ReadFile(cp.Kubeconfig)
	if err == nil {
		if err = os.MkdirAll(filepath.Dir(*kubeconfig), 0o755); err == nil {
			err = os.WriteFile(*kubeconfig, raw, 0o600)
		}
	}
	if err != nil {
		log.Error("write kubeconfig", "path", *kubeconfig, "err", err)
		return 1
	}
	abs, _ := filepath.Abs(*kubeconfig)
	v, err := cp.Clientset.Discovery().ServerVersion()
	if err != nil {
		log.Error("ask the apiserver for its version", "err", err)
		return 1
	}
	fmt.Printf(`
Kerf sandbox: a real kube-apiserver %s is serving at %s

  export KUBECONFIG=%s
  kubectl get namespaces          # kubectl: bin/k8s-%s/kubectl

Press Ctrl-C to stop it; everything it created is removed.
`, v.GitVersion, cp.Config.Host, abs, controlplane.KubernetesVersion)
	<-ctx.Done()
	return 0
}
