//go:build ignore

// Command serve runs a real etcd and kube-apiserver on loopback in the
// foreground until Ctrl-C, with Kerf's CRDs installed: the tests' control
// plane (package controlplane), for trying a manifest or a client by hand.
// It is test code, not shipped: run it with go run hack/controlplane-serve.go.
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

	"github.com/kerf-dev/kerf/internal/kube"
	"github.com/kerf-dev/kerf/test/controlplane"
)

func main() { os.Exit(run(os.Args[1:])) }

func run(args []string) int {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
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

	log.Info("starting etcd and kube-apiserver", "kubernetes", kube.KubernetesVersion, "etcd", kube.EtcdVersion)
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
`, v.GitVersion, cp.Config.Host, abs, kube.KubernetesVersion)
	<-ctx.Done()
	return 0
}
