package hub_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	hubv1 "github.com/kerf-dev/kerf/api/hub/v1"
	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/hub/store"
)

// at moves an action to t.
func at(a hubv1.Action, t time.Time) hubv1.Action {
	a.Time = metav1.NewTime(t)
	return a
}

func TestActionBucketsCountPerClusterTypeAndHourInTheDatabase(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		t0 := time.Date(2030, 3, 1, 0, 0, 0, 0, time.UTC)
		e.write(t, "east",
			at(action("shop", "web", 1, v1alpha1.ActionApplied, "Rollout", 0), t0.Add(-time.Second)), // before the window
			at(action("shop", "web", 2, v1alpha1.ActionRolledBack, "OOMKills", 0), t0),               // bucket 0, its first instant
			at(action("shop", "web", 3, v1alpha1.ActionRolledBack, "OOMKills", 0), t0.Add(59*time.Minute+59*time.Second)),
			at(action("shop", "web", 4, v1alpha1.ActionApplied, "Rollout", 0), t0.Add(90*time.Minute)),  // bucket 1
			at(action("shop", "web", 5, v1alpha1.ActionRolledBack, "OOMKills", 0), t0.Add(5*time.Hour)), // bucket 5
			at(action("shop", "web", 6, v1alpha1.ActionRolledBack, "OOMKills", 0), t0.Add(6*time.Hour)), // the end: outside
		)
		e.write(t, "west", at(action("shop", "db", 1, v1alpha1.ActionRolledBack, "Throttling", 0), t0.Add(2*time.Hour)))
		ctx := context.Background()
		q := store.BucketQuery{Start: t0, Step: time.Hour, Buckets: 6, Limit: 100}
		rows, more, err := e.store.ActionBuckets(ctx, q)
		require.NoError(t, err)
		assert.False(t, more)
		assert.Equal(t, []store.Bucket{
			{Cluster: "east", Type: v1alpha1.ActionApplied, Index: 1, Count: 1},
			{Cluster: "east", Type: v1alpha1.ActionRolledBack, Index: 0, Count: 2},
			{Cluster: "east", Type: v1alpha1.ActionRolledBack, Index: 5, Count: 1},
			{Cluster: "west", Type: v1alpha1.ActionRolledBack, Index: 2, Count: 1},
		}, rows)

		q.Types = []v1alpha1.ActionType{v1alpha1.ActionRolledBack}
		q.Limit = 2
		rows, more, err = e.store.ActionBuckets(ctx, q)
		require.NoError(t, err)
		assert.True(t, more, "a third row was left off")
		assert.Equal(t, []store.Bucket{
			{Cluster: "east", Type: v1alpha1.ActionRolledBack, Index: 0, Count: 2},
			{Cluster: "east", Type: v1alpha1.ActionRolledBack, Index: 5, Count: 1},
		}, rows)

		// One bucket of a day: the fleet page's last 24 hours.
		rows, _, err = e.store.ActionBuckets(ctx, store.BucketQuery{Start: t0.Add(-time.Hour), Step: 24 * time.Hour, Buckets: 1, Limit: 10})
		require.NoError(t, err)
		assert.Equal(t, []store.Bucket{
			{Cluster: "east", Type: v1alpha1.ActionApplied, Index: 0, Count: 2},
			{Cluster: "east", Type: v1alpha1.ActionRolledBack, Index: 0, Count: 4},
			{Cluster: "west", Type: v1alpha1.ActionRolledBack, Index: 0, Count: 1},
		}, rows)

		for _, bad := range []store.BucketQuery{
			{Start: t0, Step: time.Millisecond, Buckets: 1, Limit: 1},
			{Start: t0, Step: time.Hour, Buckets: 0, Limit: 1},
			{Start: t0, Step: time.Hour, Buckets: store.MaxBuckets + 1, Limit: 1},
			{Start: t0, Step: time.Hour, Buckets: 1, Limit: 0},
		} {
			_, _, err := e.store.ActionBuckets(ctx, bad)
			assert.Error(t, err, "%+v", bad)
		}
	})
}

func TestSessionsLiveUntilTheyExpireEndOrLoseTheirToken(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		now := time.Date(2030, 3, 1, 12, 0, 0, 0, time.UTC)
		e.store.Now = func() time.Time { return now }
		reader, err := e.store.Authenticate(ctx, e.tokens["reader"])
		require.NoError(t, err)

		secret, err := e.store.NewSession(ctx, reader.ID, time.Hour)
		require.NoError(t, err)
		assert.Len(t, secret, 43, "32 random bytes, base64url")
		got, err := e.store.SessionToken(ctx, secret)
		require.NoError(t, err)
		assert.Equal(t, reader.ID, got.ID)
		assert.Equal(t, store.ReaderToken, got.Kind)

		_, err = e.store.SessionToken(ctx, secret+"x")
		assert.ErrorIs(t, err, store.ErrBadToken, "another secret")
		_, err = e.store.SessionToken(ctx, "")
		assert.ErrorIs(t, err, store.ErrBadToken)

		now = now.Add(time.Hour)
		_, err = e.store.SessionToken(ctx, secret)
		assert.ErrorIs(t, err, store.ErrBadToken, "expired")

		now = now.Add(-30 * time.Minute)
		require.NoError(t, e.store.EndSession(ctx, secret))
		_, err = e.store.SessionToken(ctx, secret)
		assert.ErrorIs(t, err, store.ErrBadToken, "signed out")
		require.NoError(t, e.store.EndSession(ctx, secret), "signing out twice is fine")

		other, err := e.store.NewSession(ctx, reader.ID, time.Hour)
		require.NoError(t, err)
		require.NoError(t, e.store.RevokeToken(ctx, reader.ID))
		_, err = e.store.SessionToken(ctx, other)
		assert.ErrorIs(t, err, store.ErrBadToken, "a revoked token's sessions end with it")
	})
}

func TestATokenKeepsAtMostMaxSessions(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		now := time.Date(2030, 3, 1, 12, 0, 0, 0, time.UTC)
		e.store.Now = func() time.Time { now = now.Add(time.Millisecond); return now }
		reader, err := e.store.Authenticate(ctx, e.tokens["reader"])
		require.NoError(t, err)
		first, err := e.store.NewSession(ctx, reader.ID, time.Hour)
		require.NoError(t, err)
		var last string
		for range store.MaxSessionsPerToken {
			last, err = e.store.NewSession(ctx, reader.ID, time.Hour)
			require.NoError(t, err)
		}
		_, err = e.store.SessionToken(ctx, first)
		assert.ErrorIs(t, err, store.ErrBadToken, "the oldest session made room")
		_, err = e.store.SessionToken(ctx, last)
		assert.NoError(t, err)
	})
}

func TestWorkloadHistoryIsOldestFirstBoundedAndFoundByRecommendation(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		e.write(t, "east",
			action("shop", "web", 1, v1alpha1.ActionApplied, "InPlace", 0),
			action("shop", "web", 2, v1alpha1.ActionRolledBack, "OOMKills", 5),
			action("shop", "web", 3, v1alpha1.ActionApplied, "InPlace", 9),
			action("shop", "db", 1, v1alpha1.ActionApplied, "InPlace", 1))
		e.write(t, "west", action("shop", "web", 1, v1alpha1.ActionBlocked, "Cooldown", 2))
		id, err := e.store.WorkloadOfRecommendation(ctx, "east", "shop", "web")
		require.NoError(t, err)
		assert.Equal(t, store.WorkloadID("east", "shop", v1alpha1.KindDeployment, "web"), id)
		_, err = e.store.WorkloadOfRecommendation(ctx, "east", "shop", "nope")
		assert.ErrorIs(t, err, store.ErrNotFound)

		wl, items, more, err := e.store.WorkloadHistory(ctx, id, 2)
		require.NoError(t, err)
		assert.Equal(t, "web", wl.Name)
		assert.Equal(t, "east", wl.Cluster)
		assert.True(t, more, "the first action was left out")
		assert.Equal(t, []string{"rolled_back OOMKills of shop/web #2", "applied InPlace of shop/web #3"}, messagesOf(items), "the newest two, oldest first")
		_, items, more, err = e.store.WorkloadHistory(ctx, id, store.MaxHistory)
		require.NoError(t, err)
		assert.False(t, more)
		assert.Len(t, items, 3, "only east's web: not db, not west's web")

		_, _, _, err = e.store.WorkloadHistory(ctx, "wnope", 10)
		assert.ErrorIs(t, err, store.ErrNotFound)
		_, _, _, err = e.store.WorkloadHistory(ctx, id, store.MaxHistory+1)
		assert.Error(t, err)
	})
}
