//go:build kerfpprof

package main

// Profiling for the scale benchmark only (KERF_SCALE_PROFILE, see
// test/scale): built with -tags kerfpprof, kerf-leader serves
// net/http/pprof on $KERF_LEADER_PPROF_ADDR. Released binaries have none
// of it.

import (
	"net/http"
	_ "net/http/pprof" // registers /debug/pprof on http.DefaultServeMux
	"os"
	"time"
)

func init() {
	if addr := os.Getenv("KERF_LEADER_PPROF_ADDR"); addr != "" {
		srv := &http.Server{Addr: addr, ReadHeaderTimeout: 10 * time.Second}
		go func() { _ = srv.ListenAndServe() }()
	}
}
