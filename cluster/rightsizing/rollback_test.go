package rightsizing

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/test/controlplane"
	"github.com/kerf-dev/kerf/test/kubetest"
)

// TestFailedRestoreRecordsEachDistinctErrorOnce runs the failed-restore
// path of a rollback on the real control plane with two errors that
// alternate: each is recorded (history and kerf_actions_total) once, where
// before every alternation added an entry.
func TestFailedRestoreRecordsEachDistinctErrorOnce(t *testing.T) {
	cp := controlplane.Get(t)
	c := cp.Client
	ns := kubetest.Namespace(t, c)
	ctx := context.Background()
	rsr := kubetest.Recommendation(ns, "web", "web", v1alpha1.StrategyRollout, "500m", "128Mi")
	require.NoError(t, c.Create(ctx, rsr))
	breachAt := metav1.NewTime(time.Now().Truncate(time.Second))
	rsr.Status = v1alpha1.RightsizingRecommendationStatus{
		Phase: v1alpha1.PhaseRolledBack, Reason: v1alpha1.HealthWatchOOMKills,
		// A failure of an earlier rollback with the same message is not
		// this rollback's.
		History: []v1alpha1.Action{{Time: metav1.NewTime(breachAt.Add(-time.Hour)), Type: v1alpha1.ActionFailed,
			Reason: v1alpha1.ReasonRollbackError, Message: "error A", Resources: []v1alpha1.ResourceName{"memory"}}},
		Breach: &v1alpha1.Breach{Reason: v1alpha1.HealthWatchOOMKills, At: breachAt, Resources: []v1alpha1.ResourceName{"memory"}},
	}
	require.NoError(t, c.Status().Update(ctx, rsr))

	r := &Reconciler{Client: c, Recorder: events.NewFakeRecorder(100), Metrics: NewMetrics(prometheus.NewRegistry()),
		Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Now: time.Now}
	rc := &reconcileContext{r: r, rsr: rsr, now: time.Now()}
	for i := range 6 {
		cause := errors.New("error A")
		if i%2 == 1 {
			cause = errors.New("error B")
		}
		_, err := rc.restoreFailed(ctx, cause)
		require.ErrorContains(t, err, cause.Error())
	}
	got := kubetest.GetRSR(t, c, ns, "web")
	var msgs []string
	for _, a := range got.Status.History {
		if a.Type == v1alpha1.ActionFailed {
			msgs = append(msgs, a.Message)
		}
	}
	assert.Equal(t, []string{"error A", "error A", "error B"}, msgs, "the old failure, then each error of this rollback once")
	assert.Equal(t, 2.0, testutil.ToFloat64(r.Metrics.Actions.WithLabelValues("failed", v1alpha1.ReasonRollbackError, "memory")))
}
