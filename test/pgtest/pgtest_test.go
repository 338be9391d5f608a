package pgtest_test

import (
	"context"
	"database/sql"
	"net/url"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kerf-dev/kerf/test/pgtest"
)

// TestServerStartsServesAndStops starts a real PostgreSQL 15, makes two
// databases on it, and checks that Stop removes its directory.
func TestServerStartsServesAndStops(t *testing.T) {
	if err := pgtest.Available(); err != nil {
		pgtest.Need(t, nil, err)
	}
	ctx := context.Background()
	srv, err := pgtest.Start(ctx, pgtest.Options{})
	require.NoError(t, err)
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			srv.Stop()
		}
	})
	a, err := srv.NewDatabase(ctx)
	require.NoError(t, err)
	b, err := srv.NewDatabase(ctx)
	require.NoError(t, err)
	assert.NotEqual(t, a, b)
	db, err := sql.Open("pgx", a)
	require.NoError(t, err)
	defer db.Close()
	var version, who string
	require.NoError(t, db.QueryRowContext(ctx, "SELECT version(), current_user").Scan(&version, &who))
	assert.True(t, strings.HasPrefix(version, "PostgreSQL 15."), version)
	assert.Equal(t, "postgres", who)
	u, err := url.Parse(a)
	require.NoError(t, err)
	dir := u.Query().Get("host")
	srv.Stop()
	stopped = true
	_, err = os.Stat(dir)
	assert.True(t, os.IsNotExist(err), "Stop removes %s", dir)
}
