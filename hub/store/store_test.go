package store

import (
	"testing"

	"github.com/stretchr/testify/assert"

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
