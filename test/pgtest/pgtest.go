// Package pgtest runs a real PostgreSQL 15 server for tests and benchmarks
// (docs/hub.md): Debian's postgresql-15 binaries (hack/apt.sh), a fresh
// cluster made by initdb in a temporary directory, listening only on a
// unix socket there, run as an unprivileged user when the tests run as
// root, and removed by Stop. No mocks: the hub's store suite runs on it.
package pgtest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" driver
)

// BinDir is where Debian's postgresql-15 puts initdb and postgres.
const BinDir = "/usr/lib/postgresql/15/bin"

// port names the socket file (.s.PGSQL.<port>); nothing listens on TCP.
const port = 5432

// Available says why PostgreSQL cannot run here, or nil if it can.
func Available() error {
	for _, b := range []string{"initdb", "postgres"} {
		if _, err := os.Stat(filepath.Join(BinDir, b)); err != nil {
			return fmt.Errorf("PostgreSQL 15 is not installed (%s/%s missing; install Debian's postgresql-15, as hack/apt.sh does): %w", BinDir, b, err)
		}
	}
	return nil
}

// Required reports whether a missing PostgreSQL fails the tests rather than
// skipping them: under KERF_REQUIRE_CONTROLPLANE=1 or CI=true.
func Required() bool {
	return os.Getenv("KERF_REQUIRE_CONTROLPLANE") == "1" || os.Getenv("CI") == "true"
}

// Options tune a server.
type Options struct {
	// Durable keeps fsync and synchronous commits on, as in production;
	// benchmarks want it. Tests leave it off, which is faster and safe
	// for a database thrown away at the end.
	Durable bool
}

// Server is a running PostgreSQL.
type Server struct {
	dir  string
	cmd  *exec.Cmd
	done chan error
	n    atomic.Int64
}

// Start makes a fresh cluster in a temporary directory and starts
// PostgreSQL on it; Stop stops it and removes the directory.
func Start(ctx context.Context, opts Options) (*Server, error) {
	if err := Available(); err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "kerf-pgtest-")
	if err != nil {
		return nil, fmt.Errorf("make PostgreSQL directory: %w", err)
	}
	s := &Server{dir: dir, done: make(chan error, 1)}
	cred, err := runAs()
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	if cred != nil {
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			_ = os.RemoveAll(dir)
			return nil, fmt.Errorf("give %s to uid %d: %w", dir, cred.Uid, err)
		}
	}
	data := filepath.Join(dir, "data")
	initdb := exec.CommandContext(ctx, filepath.Join(BinDir, "initdb"), "-D", data, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--locale=C", "--no-sync")
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	initdb.Dir = dir
	if out, err := initdb.CombinedOutput(); err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("initdb %s: %w: %s", data, err, lastLines(string(out), 10))
	}
	args := []string{"-D", data, "-k", dir, "-p", strconv.Itoa(port), "-c", "listen_addresses=", "-c", "max_connections=200"}
	if !opts.Durable {
		args = append(args, "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off")
	}
	logPath := filepath.Join(dir, "postgres.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("create PostgreSQL log: %w", err)
	}
	s.cmd = exec.Command(filepath.Join(BinDir, "postgres"), args...)
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Setpgid: true}
	s.cmd.Stdout, s.cmd.Stderr = logFile, logFile
	s.cmd.Dir = dir
	if err := s.cmd.Start(); err != nil {
		_ = logFile.Close()
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("start postgres: %w", err)
	}
	go func() { s.done <- s.cmd.Wait(); _ = logFile.Close() }()
	if err := s.waitReady(ctx); err != nil {
		log, _ := os.ReadFile(logPath)
		s.Stop()
		return nil, fmt.Errorf("PostgreSQL in %s did not start: %w: %s", dir, err, lastLines(string(log), 10))
	}
	return s, nil
}

// runAs returns the credential to run PostgreSQL with: nobody's when the
// process is root (PostgreSQL refuses to run as root), none otherwise.
func runAs() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("nobody")
	if err != nil {
		return nil, fmt.Errorf("look up user nobody to run PostgreSQL as: %w", err)
	}
	uid, _ := strconv.ParseUint(u.Uid, 10, 32)
	gid, _ := strconv.ParseUint(u.Gid, 10, 32)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

func (s *Server) waitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	db, err := sql.Open("pgx", s.DSN("postgres"))
	if err != nil {
		return err
	}
	defer db.Close()
	for {
		err := db.PingContext(ctx)
		if err == nil {
			return nil
		}
		select {
		case werr := <-s.done:
			s.done <- werr
			return fmt.Errorf("postgres exited: %v", werr)
		case <-ctx.Done():
			return fmt.Errorf("not ready after 60s: %w", err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// DSN is the connection URL of a database on the server (the socket's
// directory is the host parameter).
func (s *Server) DSN(database string) string {
	q := url.Values{"host": {s.dir}, "port": {strconv.Itoa(port)}, "sslmode": {"disable"}}
	return "postgres://postgres@/" + database + "?" + q.Encode()
}

// NewDatabase creates an empty database with a fresh name and returns its
// connection string.
func (s *Server) NewDatabase(ctx context.Context) (string, error) {
	name := fmt.Sprintf("kerf_%d", s.n.Add(1))
	db, err := sql.Open("pgx", s.DSN("postgres"))
	if err != nil {
		return "", fmt.Errorf("connect to PostgreSQL: %w", err)
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, "CREATE DATABASE "+name); err != nil {
		return "", fmt.Errorf("create database %s: %w", name, err)
	}
	return s.DSN(name), nil
}

// Stop stops PostgreSQL (a fast shutdown, then a kill after 10 s) and
// removes its directory.
func (s *Server) Stop() {
	if s.cmd != nil && s.cmd.Process != nil {
		_ = s.cmd.Process.Signal(syscall.SIGINT)
		select {
		case <-s.done:
		case <-time.After(10 * time.Second):
			_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
			<-s.done
		}
	}
	_ = os.RemoveAll(s.dir)
}

// Main runs a package's tests with one server for all of them: it starts
// one, stores it in *srv, runs m and stops it. When PostgreSQL cannot run,
// *srv stays nil and *why says why, so the tests that need it skip (or fail,
// if Required). Use it from TestMain: os.Exit(pgtest.Main(m, &srv, &why)).
func Main(m *testing.M, srv **Server, why *error) int {
	s, err := Start(context.Background(), Options{})
	if err != nil {
		*why = err
		return m.Run()
	}
	*srv = s
	defer s.Stop()
	return m.Run()
}

// Need returns the server, or ends the test: a failure when Required, a
// skip with the reason otherwise.
func Need(tb testing.TB, srv *Server, why error) *Server {
	tb.Helper()
	if srv != nil {
		return srv
	}
	if why == nil {
		why = errors.New("no PostgreSQL server was started (call pgtest.Main from TestMain)")
	}
	if Required() {
		tb.Fatalf("PostgreSQL required (KERF_REQUIRE_CONTROLPLANE=1 or CI=true): %v", why)
	}
	tb.Skipf("PostgreSQL unavailable: %v", why)
	return nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
