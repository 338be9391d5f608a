// Command cadvisor is the cadvisor that make bench-peers measures the
// agent against (docs/performance.md): cadvisor's own library packages
// (github.com/google/cadvisor/lib: manager, metrics) wired as its
// cmd/cadvisor.go wires them, with what that binary adds for OOM kills
// (cmd/internal/api/oom.go: the kernel log through oomparser, a count per
// container) and nothing else: the raw cgroup factory only (no docker,
// containerd, crio or systemd factories, no filesystem plugins), the CPU,
// memory and OOM metrics only (CFS throttling is part of cpu), no disk or
// network metrics, no web UI, no perf, resctrl or application metrics, no
// storage driver. cadvisor's cmd module is not on the Go module proxy, so
// this main stands in for it; it is built by the benchmark and shipped
// nowhere. Its flags are cadvisor's (--housekeeping_interval,
// --max_housekeeping_interval, --allow_dynamic_housekeeping, --docker_only,
// --disable_root_cgroup_stats, ...) plus those below.
package main

import (
	"flag"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/google/cadvisor/lib/cache/memory"
	"github.com/google/cadvisor/lib/container"
	"github.com/google/cadvisor/lib/manager"
	"github.com/google/cadvisor/lib/metrics"
	info "github.com/google/cadvisor/lib/model"
	"github.com/google/cadvisor/lib/utils/sysfs"
	"github.com/google/cadvisor/utils/oomparser"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

var (
	listen          = flag.String("listen", "127.0.0.1:8080", "address of /metrics")
	enableMetrics   = flag.String("enable_metrics", "cpu,memory,oom_event", "comma-separated metric kinds, as cadvisor's --enable_metrics")
	storageDuration = flag.Duration("storage_duration", 2*time.Minute, "how long stats are kept in memory, as cadvisor's")
	rawPrefixes     = flag.String("raw_cgroup_prefix_whitelist", "", "cgroup path prefixes collected even with --docker_only, as cadvisor's")
)

func main() {
	klog.InitFlags(nil)
	defer klog.Flush()
	flag.Parse()

	included := container.MetricSet{}
	if err := included.Set(*enableMetrics); err != nil {
		klog.Fatalf("--enable_metrics %q: %v", *enableMetrics, err)
	}
	m, err := manager.New(memory.New(*storageDuration, nil), sysfs.NewRealSysFs(), manager.HousekeepingConfigFlags,
		included, strings.Split(*rawPrefixes, ","), nil, "", 0)
	if err != nil {
		klog.Fatalf("create the manager: %v", err)
	}
	if included.Has(container.OOMMetrics) {
		startOOMWatcher()
	}

	// As cmd/internal/http.RegisterPrometheusHandler: a registry per
	// scrape, the latest stats of every container.
	goCollector := collectors.NewGoCollector()
	processCollector := collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})
	machineCollector := metrics.NewPrometheusMachineCollector(m, included)
	mux := http.NewServeMux()
	mux.Handle("/metrics", http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		opts := info.RequestOptions{IdType: "name", Count: 1, Recursive: true}
		r := prometheus.NewRegistry()
		r.MustRegister(
			metrics.NewPrometheusCollector(oomInfoProvider{m}, metrics.DefaultContainerLabels, included, clock.RealClock{}, opts),
			machineCollector, goCollector, processCollector)
		promhttp.HandlerFor(r, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError}).ServeHTTP(w, req)
	}))
	if err := m.Start(); err != nil {
		klog.Fatalf("start the manager: %v", err)
	}
	c := make(chan os.Signal, 1)
	signal.Notify(c, os.Interrupt, syscall.SIGTERM)
	go func() {
		<-c
		if err := m.Stop(); err != nil {
			klog.Errorf("stop the manager: %v", err)
		}
		os.Exit(0)
	}()
	srv := &http.Server{Addr: *listen, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	klog.Fatal(srv.ListenAndServe())
}

// oomCounts is the OOM kill count per container (cgroup path), as
// cmd/internal/api/oom.go keeps it.
var oomCounts = struct {
	sync.Mutex
	byContainer map[string]uint64
}{byContainer: map[string]uint64{}}

// startOOMWatcher counts the kernel log's OOM kills per container, as
// cmd/internal/api/oom.go does (without its event manager).
func startOOMWatcher() {
	oomLog, err := oomparser.New()
	if err != nil {
		klog.Warningf("no source for OOM detection, OOM counts disabled: %v", err)
		return
	}
	out := make(chan *oomparser.OomInstance, 10)
	go oomLog.StreamOoms(out)
	go func() {
		for o := range out {
			oomCounts.Lock()
			oomCounts.byContainer[o.ContainerName]++
			oomCounts.Unlock()
		}
	}()
}

// oomInfoProvider is cmd/internal/api's: the manager, with each
// container's OOM count in its stats.
type oomInfoProvider struct{ manager.Manager }

// GetRequestedContainersInfo is the manager's, with OOMEvents set.
func (p oomInfoProvider) GetRequestedContainersInfo(name string, options info.RequestOptions) (map[string]*info.ContainerInfo, error) {
	infos, err := p.Manager.GetRequestedContainersInfo(name, options)
	oomCounts.Lock()
	defer oomCounts.Unlock()
	for _, ci := range infos {
		n := oomCounts.byContainer[ci.Name]
		for _, s := range ci.Stats {
			s.OOMEvents = n
		}
	}
	return infos, err
}
