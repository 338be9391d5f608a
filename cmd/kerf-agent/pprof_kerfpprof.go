//go:build kerfpprof

package main

// Profiling for the budget benchmark only (KERF_BUDGET_PROFILE, see
// budget_test.go): built with -tags kerfpprof, kerf-agent serves
// net/http/pprof on $KERF_AGENT_PPROF_ADDR. Released binaries have none
// of it.

import (
	"net/http"
	_ "net/http/pprof" // registers /debug/pprof on http.DefaultServeMux
	"os"
	"time"
)

func init() {
	if addr := os.Getenv("KERF_AGENT_PPROF_ADDR"); addr != "" {
		srv := &http.Server{Addr: addr, ReadHeaderTimeout: 10 * time.Second}
		go func() { _ = srv.ListenAndServe() }()
	}
}
