package main

import (
	"fmt"
	"log/slog"
	"os/exec"
	"runtime"
	"time"

	"github.com/go-logr/logr"
	"github.com/spf13/cobra"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/kerf-dev/kerf/cluster/dashboard"
)

// newDashboardCommand is kubectl kerf dashboard: Kerf's pages served on
// localhost from the user's kubeconfig (cluster/dashboard).
func newDashboardCommand(o *options) *cobra.Command {
	var address string
	var open bool
	cmd := &cobra.Command{
		Use:   "dashboard",
		Short: "Serve Kerf's pages on localhost, read with your kubeconfig",
		Long: "dashboard serves Kerf's web pages (Activity and each workload's page) on a loopback\n" +
			"address, reading the cluster with your kubeconfig: you see what the apiserver lets\n" +
			"you read. It prints the address, which holds a token made for this run; --open\n" +
			"starts your browser on it. Ctrl-C stops it.",
		Example: "  kubectl kerf dashboard --open\n  kubectl kerf dashboard -n shop --address 127.0.0.1:8080",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// The client's own warnings, to stderr: the server runs long
			// enough for controller-runtime to ask for a logger.
			log := slog.New(slog.NewTextHandler(o.streams.ErrOut, &slog.HandlerOptions{Level: slog.LevelWarn}))
			ctrllog.SetLogger(logr.FromSlogHandler(log.Handler()))
			cfg, err := o.flags.ToRESTConfig()
			if err != nil {
				return fmt.Errorf("read the kubeconfig: %w", err)
			}
			ns, err := o.namespace()
			if err != nil {
				return err
			}
			srv, err := dashboard.New(dashboard.Config{Rest: cfg, Namespace: ns, Refresh: 30 * time.Second, Now: o.now, Log: log})
			if err != nil {
				return err
			}
			ln, err := dashboard.Listen(address)
			if err != nil {
				return err
			}
			addr := srv.URL(ln)
			fmt.Fprintf(o.streams.Out, "Kerf's dashboard for %s: %s\nCtrl-C stops it.\n", cfg.Host, addr)
			if open {
				if err := openBrowser(addr); err != nil {
					fmt.Fprintf(o.streams.ErrOut, "cannot start a browser (%v): open the address above\n", err)
				}
			}
			return srv.Serve(cmd.Context(), ln)
		},
	}
	cmd.Flags().StringVar(&address, "address", "127.0.0.1:0", "loopback address to serve on (port 0: any free port)")
	cmd.Flags().BoolVar(&open, "open", false, "start the browser on the address (xdg-open, or open on macOS)")
	return cmd
}

// openBrowser starts xdg-open (open on macOS) on addr, without waiting.
func openBrowser(addr string) error {
	name := "xdg-open"
	if runtime.GOOS == "darwin" {
		name = "open"
	}
	path, err := exec.LookPath(name)
	if err != nil {
		return err
	}
	c := exec.Command(path, addr)
	if err := c.Start(); err != nil {
		return fmt.Errorf("start %s: %w", name, err)
	}
	go func() { _ = c.Wait() }()
	return nil
}
