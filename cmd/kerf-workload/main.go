// Command kerf-workload is the test workload of Kerf's sandbox and
// end-to-end tests (image kerf.local/kerf-workload:dev): a static program
// that allocates memory, burns CPU and crashes when told, by flags at start
// or through its HTTP control endpoint, so that OOM kills, throttling and
// restarts happen on demand. A child process can allocate instead, so that
// the OOM killer takes it and not the main process. It also reports the
// limits the kernel enforces on its container (GET /limits), for nodes
// whose cgroup files the scenarios cannot read. See docs/install.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	if mib, ok := os.LookupEnv(childEnv); ok {
		os.Exit(runChild(log, mib))
	}
	fs := flag.NewFlagSet("kerf-workload", flag.ContinueOnError)
	allocMiB := fs.Int("alloc-mib", 0, "MiB to allocate and touch at start")
	burn := fs.Int("burn-millicores", 0, "CPU to burn from the start, in thousandths of a core")
	crashAfter := fs.Duration("crash-after", 0, "exit with --exit-code this long after the start (0: never)")
	exitCode := fs.Int("exit-code", 1, "exit code of --crash-after")
	listen := fs.String("listen", ":8080", "address of the HTTP control endpoint (empty: none)")
	cgroupRoot := fs.String("cgroup-root", "/sys/fs/cgroup", "where the container's cgroup is mounted, for GET /limits")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: kerf-workload [flags]\n\n"+
			"Kerf's test workload. HTTP control endpoint:\n"+
			"  POST /alloc?mib=N          allocate and touch N MiB more, keep it\n"+
			"  POST /alloc?mib=N&child=1  the same in a child process, one at a time\n"+
			"  POST /free                 free every allocation, end the child\n"+
			"  POST /burn?millicores=N    burn N thousandths of a core (0 stops)\n"+
			"  POST /crash?code=N         exit now with code N\n"+
			"  GET  /limits               the kernel's limits of this container (JSON)\n"+
			"  GET  /healthz, GET /stats (JSON)\n\nFlags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(os.Args[1:]); err != nil {
		if err == flag.ErrHelp {
			os.Exit(0)
		}
		os.Exit(2)
	}
	switch {
	case *allocMiB < 0:
		log.Error("kerf-workload cannot start", "err", fmt.Sprintf("--alloc-mib %d: must be ≥ 0", *allocMiB))
		os.Exit(2)
	case *burn < 0:
		log.Error("kerf-workload cannot start", "err", fmt.Sprintf("--burn-millicores %d: must be ≥ 0", *burn))
		os.Exit(2)
	case *crashAfter < 0:
		log.Error("kerf-workload cannot start", "err", fmt.Sprintf("--crash-after %s: must be ≥ 0", *crashAfter))
		os.Exit(2)
	case *exitCode < 0 || *exitCode > 255:
		log.Error("kerf-workload cannot start", "err", fmt.Sprintf("--exit-code %d: must be 0..255", *exitCode))
		os.Exit(2)
	}
	exit := func(code int) {
		log.Info("kerf-workload exiting", "code", code)
		os.Exit(code)
	}
	w := newWorkload(exit, *cgroupRoot, log)
	if *crashAfter > 0 {
		time.AfterFunc(*crashAfter, func() { exit(*exitCode) })
	}
	w.Burn(*burn)
	w.Alloc(*allocMiB)
	log.Info("kerf-workload started", "allocMiB", *allocMiB, "burnMillicores", *burn, "crashAfter", crashAfter.String(), "listen", *listen)

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *listen == "" {
		<-ctx.Done()
		return
	}
	srv := &http.Server{Addr: *listen, Handler: w.Handler(), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
	}()
	if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Error("kerf-workload stopped", "err", err)
		os.Exit(1)
	}
}
