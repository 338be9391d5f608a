package store

import (
	"database/sql"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kerf-dev/kerf/api/v1alpha1"
)

func TestWorkloadIDIsStableAndTellsWorkloadsApart(t *testing.T) {
	id := WorkloadID("east", "shop", v1alpha1.KindDeployment, "web")
	// Pinned: links and bookmarks hold ids, so a change here breaks them.
	assert.Equal(t, "wb86f247eeec1d662a2e358fa", id)
	assert.Len(t, id, 25)
	for _, other := range []string{
		WorkloadID("west", "shop", v1alpha1.KindDeployment, "web"),
		WorkloadID("east", "shop", v1alpha1.KindStatefulSet, "web"),
		WorkloadID("east", "shopweb", v1alpha1.KindDeployment, ""),
		WorkloadID("east", "sho", v1alpha1.KindDeployment, "pweb"),
	} {
		assert.NotEqual(t, id, other)
	}
}

func TestTokensSplitIntoIDAndSecret(t *testing.T) {
	tok, id, hash := newToken()
	gotID, secret, ok := splitToken(tok)
	assert.True(t, ok)
	assert.Equal(t, id, gotID)
	assert.Equal(t, hash, hashSecret(secret))
	for _, bad := range []string{"", "kerf_", "kerf_abc_def", "kerf_0123456789abcdef_", "Bearer kerf_0123456789abcdef_x", "xkerf_0123456789abcdef_x"} {
		_, _, ok := splitToken(bad)
		assert.False(t, ok, bad)
	}
	_, _, ok = splitToken("kerf_0123456789abcdef_se_cr-et")
	assert.True(t, ok, "the secret is base64url and may hold '_'")
}

func TestQueriesAreRewrittenForPostgres(t *testing.T) {
	pg := &Store{dialect: Postgres}
	assert.Equal(t, "a = $1 AND b IN ($2, $3)", pg.q("a = ? AND b IN (?, ?)"))
	assert.Equal(t, "a = ?", (&Store{dialect: SQLite}).q("a = ?"))
}

func TestRedactHidesPasswords(t *testing.T) {
	assert.Equal(t, "postgres://kerf:xxxxx@db:5432/kerf", redact("postgres://kerf:s3cret@db:5432/kerf"))
	assert.Equal(t, "(a connection string with a password)", redact("host=db password=s3cret"))
	assert.Equal(t, "sqlite:/tmp/x.db", redact("sqlite:/tmp/x.db"))
}

// TestSQLiteCommitsAreSyncedBeforeTheyAreAcknowledged: every connection of
// a SQLite store runs with synchronous=FULL (2), so the WAL is synced at
// each commit and an acknowledged batch survives a crash of the node
// (issue 30, item 9: with NORMAL, 1, a power loss could lose the last
// commits after the leader moved its delivery cursor past them). A
// process kill loses nothing either way; the page cache's loss cannot be
// made in a test, so the test reads the setting each connection has.
func TestSQLiteCommitsAreSyncedBeforeTheyAreAcknowledged(t *testing.T) {
	s, err := Open(t.Context(), "sqlite:"+filepath.Join(t.TempDir(), "hub.db"), nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	// Several connections at once, so more than one is opened.
	conns := make([]*sql.Conn, 3)
	for i := range conns {
		c, err := s.db.Conn(t.Context())
		require.NoError(t, err)
		defer func() { _ = c.Close() }()
		conns[i] = c
	}
	for i, c := range conns {
		var mode int
		require.NoError(t, c.QueryRowContext(t.Context(), "PRAGMA synchronous").Scan(&mode))
		assert.Equal(t, 2, mode, "connection %d: synchronous=FULL", i)
		var journal string
		require.NoError(t, c.QueryRowContext(t.Context(), "PRAGMA journal_mode").Scan(&journal))
		assert.Equal(t, "wal", journal, "connection %d", i)
	}
}
