// Package store is kerf-hub's database (docs/hub.md): the registered
// clusters and their tokens, every cluster's actions, each workload's last
// action and the action counters. It runs over database/sql on embedded
// SQLite (modernc.org/sqlite, no CGO) or PostgreSQL (pgx), migrates the
// schema at Open with goose, and keeps no state in the process that several
// hub replicas would have to share.
package store

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" driver
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"
	_ "modernc.org/sqlite" // registers the "sqlite" driver
)

// Dialect is the kind of database a Store runs on.
type Dialect string

// The supported databases.
const (
	// SQLite is an embedded SQLite file, for one hub replica.
	SQLite Dialect = "sqlite"
	// Postgres is PostgreSQL, which several hub replicas may share.
	Postgres Dialect = "postgres"
)

// migrations holds the schema's versions. A file named NNNNN_x.sql runs on
// both databases; NNNNN_x.sqlite.sql and NNNNN_x.postgres.sql are the two
// halves of a version whose SQL differs.
//
//go:embed migrations/*.sql
var migrations embed.FS

// Errors the store's callers tell apart.
var (
	// ErrNotFound is returned when the named cluster, token or workload
	// does not exist.
	ErrNotFound = errors.New("not found")
	// ErrExists is returned when registering a name that is taken.
	ErrExists = errors.New("already exists")
	// ErrBadToken is returned by Authenticate for any token that does not
	// authenticate; the reason is not told apart, on purpose.
	ErrBadToken = errors.New("invalid token")
)

// Store is the hub's database. Its methods are safe for concurrent use.
type Store struct {
	db      *sql.DB
	dialect Dialect
	// Now is the clock of registration, contact and reception times; nil
	// means time.Now.
	Now func() time.Time
}

// Open connects to the database named by dsn, migrates its schema to the
// newest version and returns the store. dsn is sqlite:PATH (the file is
// created, with its directory) or a PostgreSQL URL (postgres://...,
// postgresql://...) or key=value string prefixed with postgres:.
func Open(ctx context.Context, dsn string, log *slog.Logger) (*Store, error) {
	if log == nil {
		log = slog.Default()
	}
	s := &Store{}
	var err error
	switch {
	case strings.HasPrefix(dsn, "sqlite:"):
		s.dialect = SQLite
		s.db, err = openSQLite(strings.TrimPrefix(dsn, "sqlite:"))
	case strings.HasPrefix(dsn, "postgres://"), strings.HasPrefix(dsn, "postgresql://"):
		s.dialect = Postgres
		s.db, err = sql.Open("pgx", dsn)
	case strings.HasPrefix(dsn, "postgres:"):
		s.dialect = Postgres
		s.db, err = sql.Open("pgx", strings.TrimPrefix(dsn, "postgres:"))
	default:
		return nil, fmt.Errorf("database %q: must start with sqlite: or postgres:// (or postgresql://, postgres:)", redact(dsn))
	}
	if err != nil {
		return nil, fmt.Errorf("open %s database: %w", s.dialect, err)
	}
	if s.dialect == Postgres {
		// Keep connections for the usual concurrency instead of
		// reconnecting for every burst of batches.
		s.db.SetMaxIdleConns(10)
		s.db.SetConnMaxIdleTime(5 * time.Minute)
		// And no more than MaxOpenConns, whatever the requests in flight:
		// one replica never takes PostgreSQL's connections (100 by
		// default) from the others.
		s.db.SetMaxOpenConns(MaxOpenConns)
	}
	if err := s.db.PingContext(ctx); err != nil {
		_ = s.db.Close()
		return nil, fmt.Errorf("connect to %s database %s: %w", s.dialect, redact(dsn), err)
	}
	if err := s.migrate(ctx, log); err != nil {
		_ = s.db.Close()
		return nil, err
	}
	return s, nil
}

// MaxOpenConns bounds a store's connections to PostgreSQL.
const MaxOpenConns = 16

// openSQLite opens the file with foreign keys on, WAL, a busy timeout, and
// write transactions that take the write lock at BEGIN (so two writers wait
// for each other instead of failing to upgrade). synchronous is FULL: the
// WAL is synced at every commit, so a batch the hub answered 200 for
// survives a crash of its node, not only of its process (with NORMAL a
// power loss could undo the last commits after the leader moved its
// cursor past them). The ingest benchmark measured no cost: 4,060-4,260
// actions/s with NORMAL, 4,320 with FULL, alternated in one run.
func openSQLite(path string) (*sql.DB, error) {
	if path == "" {
		return nil, errors.New("sqlite: needs a file path")
	}
	if dir := filepath.Dir(path); dir != "" {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, fmt.Errorf("create directory of %s: %w", path, err)
		}
	}
	dsn := "file:" + path + "?_txlock=immediate&_pragma=foreign_keys(1)&_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)"
	return sql.Open("sqlite", dsn)
}

// migrate runs the embedded migrations of the store's dialect. On
// PostgreSQL a session advisory lock keeps replicas that start together
// from migrating at once.
func (s *Store) migrate(ctx context.Context, log *slog.Logger) error {
	other := map[Dialect]string{SQLite: ".postgres.sql", Postgres: ".sqlite.sql"}[s.dialect]
	entries, err := migrations.ReadDir("migrations")
	if err != nil {
		return fmt.Errorf("read embedded migrations: %w", err)
	}
	var exclude []string
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), other) {
			exclude = append(exclude, e.Name())
		}
	}
	opts := []goose.ProviderOption{goose.WithExcludeNames(exclude), goose.WithDisableGlobalRegistry(true)}
	dialect := goose.DialectSQLite3
	if s.dialect == Postgres {
		dialect = goose.DialectPostgres
		locker, err := lock.NewPostgresSessionLocker()
		if err != nil {
			return fmt.Errorf("make migration lock: %w", err)
		}
		opts = append(opts, goose.WithSessionLocker(locker))
	}
	sub, err := fs.Sub(migrations, "migrations")
	if err != nil {
		return fmt.Errorf("read embedded migrations: %w", err)
	}
	p, err := goose.NewProvider(dialect, s.db, sub, opts...)
	if err != nil {
		return fmt.Errorf("prepare %s migrations: %w", s.dialect, err)
	}
	results, err := p.Up(ctx)
	if err != nil {
		return fmt.Errorf("migrate %s database: %w", s.dialect, err)
	}
	for _, r := range results {
		log.Info("migrated hub database", "dialect", string(s.dialect), "version", r.Source.Version, "file", filepath.Base(r.Source.Path), "duration", r.Duration)
	}
	return nil
}

// SchemaVersion returns the newest migration applied to the database.
func (s *Store) SchemaVersion(ctx context.Context) (int64, error) {
	var v int64
	err := s.db.QueryRowContext(ctx, "SELECT COALESCE(MAX(version_id), 0) FROM goose_db_version WHERE is_applied").Scan(&v)
	if err != nil {
		return 0, fmt.Errorf("read schema version: %w", err)
	}
	return v, nil
}

// Dialect says which database the store runs on.
func (s *Store) Dialect() Dialect { return s.dialect }

// Ping checks that the database answers.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.db.PingContext(ctx); err != nil {
		return fmt.Errorf("ping %s database: %w", s.dialect, err)
	}
	return nil
}

// Close closes the database.
func (s *Store) Close() error { return s.db.Close() }

func (s *Store) now() time.Time {
	if s.Now == nil {
		return time.Now()
	}
	return s.Now()
}

// q rewrites a query written with ? placeholders for the store's dialect
// ($1, $2, ... on PostgreSQL). The queries hold no ? of their own.
func (s *Store) q(query string) string {
	if s.dialect != Postgres {
		return query
	}
	var b strings.Builder
	n := 0
	for _, r := range query {
		if r == '?' {
			n++
			b.WriteString("$" + strconv.Itoa(n))
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// redact hides a password in a database URL for error messages.
func redact(dsn string) string {
	if i := strings.Index(dsn, "://"); i >= 0 {
		rest := dsn[i+3:]
		if at := strings.LastIndex(rest, "@"); at >= 0 {
			if c := strings.Index(rest[:at], ":"); c >= 0 {
				return dsn[:i+3] + rest[:c] + ":xxxxx" + rest[at:]
			}
		}
	}
	if strings.Contains(dsn, "password=") {
		return "(a connection string with a password)"
	}
	return dsn
}
