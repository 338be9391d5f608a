// Command kubectl-kerf is the kubectl plugin of Kerf (`kubectl kerf`): what
// Kerf did to each workload (status, history, explain) and pausing a policy
// or one workload, printed as kubectl prints (docs/install.md,
// "kubectl kerf").
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"k8s.io/cli-runtime/pkg/genericiooptions"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], genericiooptions.IOStreams{In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr})
	stop()
	os.Exit(code)
}

// run runs the plugin with args and returns its exit code: 0, or 1 with
// the error on ErrOut as kubectl writes it.
func run(ctx context.Context, args []string, streams genericiooptions.IOStreams) int {
	return execute(ctx, args, streams, time.Now)
}

// execute is run with the clock "since" and "until" count from.
func execute(ctx context.Context, args []string, streams genericiooptions.IOStreams, now func() time.Time) int {
	cmd := newRootCommand(streams, now)
	cmd.SetArgs(args)
	if err := cmd.ExecuteContext(ctx); err != nil {
		fmt.Fprintf(streams.ErrOut, "error: %v\n", err)
		return 1
	}
	return 0
}
