package hubtest

import (
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kerf-dev/kerf/test/pgtest"
)

// Backends are the databases a hub runs on: every test that runs on each
// (EachBackend) runs on both.
var Backends = []string{"sqlite", "postgres"}

// pg is the package's PostgreSQL, started by the first DSN("postgres") of
// the test binary and stopped by StopPostgres.
var (
	pgMu  sync.Mutex
	pgRun bool
	pg    *pgtest.Server
	pgWhy error
)

// DSN returns a fresh database of the backend ("sqlite": a file in the
// test's temporary directory; "postgres": a new database on the test
// binary's PostgreSQL, started by the first call) for one test's hub.
// Without PostgreSQL's binaries the test skips, or fails when they are
// required (pgtest.Need).
func DSN(tb testing.TB, backend string) string {
	tb.Helper()
	switch backend {
	case "sqlite":
		return SQLite(tb)
	case "postgres":
	default:
		tb.Fatalf("hubtest: unknown backend %q (want one of %v)", backend, Backends)
	}
	pgMu.Lock()
	if !pgRun {
		pgRun = true
		pg, pgWhy = pgtest.Start(context.Background(), pgtest.Options{})
	}
	srv, why := pg, pgWhy
	pgMu.Unlock()
	dsn, err := pgtest.Need(tb, srv, why).NewDatabase(context.Background())
	require.NoError(tb, err, "make a PostgreSQL database for the hub")
	return dsn
}

// StopPostgres stops the PostgreSQL that DSN started, if any. A test
// binary calls it once its tests are done (controlplane.Hooks.Teardown, or
// after m.Run).
func StopPostgres() {
	pgMu.Lock()
	defer pgMu.Unlock()
	if pg != nil {
		pg.Stop()
		pg = nil
	}
}

// EachBackend runs fn as one subtest per backend, named after it, each on
// a fresh hub with the clusters registered.
func EachBackend(t *testing.T, clusters []string, fn func(t *testing.T, h *Hub)) {
	for _, b := range Backends {
		t.Run(b, func(t *testing.T) { fn(t, Start(t, DSN(t, b), clusters...)) })
	}
}
