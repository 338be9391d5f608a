// Package memtest reads a process's memory for the tests and benchmarks
// that log or report it: the Go heap of the test process and the fields
// of /proc/<pid>/status.
package memtest

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

// Now returns the test process's live heap after two collections (a
// sync.Pool keeps its objects through one) and its resident set, in
// bytes.
func Now(tb testing.TB) (heap, rss uint64) {
	tb.Helper()
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse, Status(tb, 0, "VmRSS")
}

// Status returns a kB field of /proc/<pid>/status (VmRSS, VmHWM,
// RssAnon, ...) in bytes; pid 0 is the test process.
func Status(tb testing.TB, pid int, field string) uint64 {
	tb.Helper()
	path := "/proc/self/status"
	if pid != 0 {
		path = fmt.Sprintf("/proc/%d/status", pid)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		tb.Fatalf("read %s: %v", path, err)
	}
	for line := range strings.Lines(string(data)) {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			kb, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				tb.Fatalf("%s in %s: %v", field, path, err)
			}
			return kb << 10
		}
	}
	tb.Fatalf("no %s in %s", field, path)
	return 0
}

// MiB is bytes in MiB, as benchmarks report them.
func MiB(bytes uint64) float64 { return float64(bytes) / (1 << 20) }
