package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"sync"
	"time"

	"github.com/kerf-dev/kerf/cgroup"
)

// pageSize is the stride at which allocated memory is touched, so that
// every page is really backed (counted in the cgroup's memory usage).
const pageSize = 4096

// burnPeriod is the duty cycle of each burning goroutine: it spins for its
// share of every period and sleeps the rest.
const burnPeriod = 10 * time.Millisecond

// workload holds what the test program was told to do.
type workload struct {
	started time.Time
	exit    func(code int)
	log     *slog.Logger
	// cgroupRoot is where the container's cgroup is mounted, for GET
	// /limits.
	cgroupRoot string

	mu       sync.Mutex
	chunks   [][]byte
	burn     int           // millicores
	stopBurn chan struct{} // closed to stop the current burners
	child    *child        // the last child process (POST /alloc?child=1)
}

func newWorkload(exit func(int), cgroupRoot string, log *slog.Logger) *workload {
	return &workload{started: time.Now(), exit: exit, cgroupRoot: cgroupRoot, log: log}
}

// Alloc allocates mib MiB more, touches every page and keeps it.
func (w *workload) Alloc(mib int) {
	for range mib {
		b := touchedMiB()
		w.mu.Lock()
		w.chunks = append(w.chunks, b)
		w.mu.Unlock()
	}
}

// touchedMiB allocates one MiB and touches every page of it.
func touchedMiB() []byte {
	b := make([]byte, 1<<20)
	for i := 0; i < len(b); i += pageSize {
		b[i] = 1
	}
	return b
}

// Free drops every allocation, ends the child process if one runs, and
// returns the memory to the kernel.
func (w *workload) Free() {
	w.stopChild()
	w.mu.Lock()
	w.chunks = nil
	w.mu.Unlock()
	debug.FreeOSMemory()
}

// Burn replaces the current CPU burn with millicores thousandths of a core
// (0 stops it): ceil(millicores/1000) goroutines, each spinning for an
// equal share of every burnPeriod.
func (w *workload) Burn(millicores int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopBurn != nil {
		close(w.stopBurn)
		w.stopBurn = nil
	}
	w.burn = millicores
	if millicores <= 0 {
		return
	}
	n := (millicores + 999) / 1000
	busy := burnPeriod * time.Duration(millicores) / time.Duration(n*1000)
	stop := make(chan struct{})
	w.stopBurn = stop
	for range n {
		go spin(busy, stop)
	}
}

func spin(busy time.Duration, stop <-chan struct{}) {
	for {
		start := time.Now()
		for time.Since(start) < busy {
		}
		select {
		case <-stop:
			return
		case <-time.After(burnPeriod - busy):
		}
	}
}

// Stats is what GET /stats returns.
type Stats struct {
	AllocatedMiB   int     `json:"allocatedMiB"`
	BurnMillicores int     `json:"burnMillicores"`
	UptimeSeconds  float64 `json:"uptimeSeconds"`
	RSSBytes       int64   `json:"rssBytes"`
	Goroutines     int     `json:"goroutines"`
	PID            int     `json:"pid"`
	// Child is the last child process, running or not (POST
	// /alloc?child=1); absent before the first.
	Child *ChildStats `json:"child,omitempty"`
}

// Stats reports the current allocation, burn, the process's RSS and its
// last child.
func (w *workload) Stats() Stats {
	w.mu.Lock()
	s := Stats{AllocatedMiB: len(w.chunks), BurnMillicores: w.burn, Child: w.childStats()}
	w.mu.Unlock()
	s.UptimeSeconds = time.Since(w.started).Seconds()
	s.RSSBytes = rss()
	s.Goroutines = runtime.NumGoroutine()
	s.PID = os.Getpid()
	return s
}

// rss reads the resident set size from /proc/self/statm (proc(5): the
// second field, in pages); -1 when it cannot.
func rss() int64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return -1
	}
	var size, resident int64
	if _, err := fmt.Sscan(string(b), &size, &resident); err != nil {
		return -1
	}
	return resident * int64(os.Getpagesize())
}

// Handler serves the control endpoints.
func (w *workload) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(rw http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(rw, "ok")
	})
	mux.HandleFunc("GET /stats", func(rw http.ResponseWriter, _ *http.Request) {
		rw.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(rw).Encode(w.Stats())
	})
	mux.HandleFunc("GET /limits", func(rw http.ResponseWriter, _ *http.Request) {
		l, err := cgroup.ReadLimits(w.cgroupRoot)
		if err != nil {
			http.Error(rw, err.Error(), http.StatusInternalServerError)
			return
		}
		rw.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(rw).Encode(l)
	})
	mux.HandleFunc("POST /alloc", func(rw http.ResponseWriter, r *http.Request) {
		mib, ok := intParam(rw, r, "mib", 1)
		if !ok {
			return
		}
		switch c := r.URL.Query().Get("child"); c {
		case "", "0":
			w.Alloc(mib)
			w.writeStats(rw)
		case "1":
			// Accepted: the child allocates on its own, and may be
			// OOM-killed while it does; GET /stats follows it.
			_, err := w.StartChild(mib)
			switch {
			case errors.Is(err, errChildRunning):
				http.Error(rw, err.Error(), http.StatusConflict)
			case err != nil:
				http.Error(rw, err.Error(), http.StatusInternalServerError)
			default:
				rw.Header().Set("Content-Type", "application/json")
				rw.WriteHeader(http.StatusAccepted)
				_ = json.NewEncoder(rw).Encode(w.Stats())
			}
		default:
			http.Error(rw, fmt.Sprintf("query parameter child=%q: must be 0 or 1", c), http.StatusBadRequest)
		}
	})
	mux.HandleFunc("POST /free", func(rw http.ResponseWriter, _ *http.Request) {
		w.Free()
		w.writeStats(rw)
	})
	mux.HandleFunc("POST /burn", func(rw http.ResponseWriter, r *http.Request) {
		mc, ok := intParam(rw, r, "millicores", 0)
		if !ok {
			return
		}
		w.Burn(mc)
		w.writeStats(rw)
	})
	mux.HandleFunc("POST /crash", func(rw http.ResponseWriter, r *http.Request) {
		code, ok := intParam(rw, r, "code", 0)
		if !ok {
			return
		}
		if code > 255 {
			http.Error(rw, fmt.Sprintf("code %d: must be 0..255", code), http.StatusBadRequest)
			return
		}
		rw.WriteHeader(http.StatusAccepted)
		fmt.Fprintf(rw, "exiting with code %d\n", code)
		if f, ok := rw.(http.Flusher); ok {
			f.Flush()
		}
		w.exit(code)
	})
	return mux
}

func (w *workload) writeStats(rw http.ResponseWriter) {
	rw.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(rw).Encode(w.Stats())
}

// intParam reads the query parameter key as an integer ≥ min, answering 400
// naming the parameter when it is missing or out of range.
func intParam(rw http.ResponseWriter, r *http.Request, key string, min int) (int, bool) {
	v, err := strconv.Atoi(r.URL.Query().Get(key))
	if err != nil || v < min {
		http.Error(rw, fmt.Sprintf("query parameter %s=%q: must be an integer ≥ %d", key, r.URL.Query().Get(key), min), http.StatusBadRequest)
		return 0, false
	}
	return v, true
}
