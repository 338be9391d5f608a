package rightsizing

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/test/controlplane"
	"github.com/kerf-dev/kerf/test/kubetest"
)

// TestFittedStatusIsAcceptedByTheCRD: a status with every field the
// leader fills from unbounded inputs over the CRD's limit (messages,
// figures, 2001 touched objects, 4100 restart baselines) is refused by the
// apiserver as it stands (the limits are real), and accepted once
// fitStatus cut it: the touched objects keep the Deployment and count the
// 977 pods left out, the messages say how much they lost.
func TestFittedStatusIsAcceptedByTheCRD(t *testing.T) {
	c := controlplane.Get(t).Client
	ns := kubetest.Namespace(t, c)
	ctx := context.Background()
	rsr := kubetest.Recommendation(ns, "web", "web", v1alpha1.StrategyDeferred, "500m", "128Mi")
	require.NoError(t, c.Create(ctx, rsr))

	now := metav1.NewTime(time.Now().Truncate(time.Second))
	long := func(n int) string { return strings.Repeat("é", n/2) } // two bytes a rune
	figures := make([]string, 20)
	for i := range figures {
		figures[i] = fmt.Sprintf("figure %d %s", i, long(300))
	}
	touched := []v1alpha1.TouchedObject{{Kind: "Deployment", Name: "web"}}
	for i := range 2000 {
		touched = append(touched, v1alpha1.TouchedObject{Kind: "Pod", Name: fmt.Sprintf("web-h1-%04d", i), ResourceVersion: "1"})
	}
	baselines := make([]v1alpha1.RestartBaseline, 4100)
	for i := range baselines {
		baselines[i] = v1alpha1.RestartBaseline{Pod: fmt.Sprintf("web-h1-%04d", i), Container: "app"}
	}
	canary := make([]string, 1500)
	for i := range canary {
		canary[i] = fmt.Sprintf("web-h1-%04d", i)
	}
	rsr.Status = v1alpha1.RightsizingRecommendationStatus{
		Phase: v1alpha1.PhaseRolledBack, Reason: v1alpha1.HealthWatchOOMKills, Message: long(40000),
		Conditions: []metav1.Condition{{Type: v1alpha1.ConditionHealthWatch, Status: metav1.ConditionFalse,
			Reason: v1alpha1.HealthWatchOOMKills, Message: long(40000), LastTransitionTime: now}},
		Change: &v1alpha1.Change{AppliedAt: now, Strategy: v1alpha1.StrategyDeferred, Touched: touched, RestartBaselines: baselines,
			Canary: &v1alpha1.CanaryState{Pods: canary, Of: 3000, StartedAt: now, Until: now}},
		Breach: &v1alpha1.Breach{Reason: v1alpha1.HealthWatchOOMKills, At: now, Figures: figures},
		Rollback: &v1alpha1.RollbackState{State: v1alpha1.BackoffBackingOff, Reason: v1alpha1.HealthWatchOOMKills,
			Message: long(5000)},
		History: []v1alpha1.Action{{Seq: 1, Time: now, Type: v1alpha1.ActionRolledBack, Reason: v1alpha1.HealthWatchOOMKills,
			Message: long(10000), Figures: figures}},
	}
	raw := rsr.DeepCopy()
	err := c.Status().Update(ctx, raw)
	require.True(t, apierrors.IsInvalid(err), "the CRD refuses the status as it stands: %v", err)
	// The apiserver checks the strings' lengths in a second pass, once
	// the lists are within theirs.
	for _, field := range []string{"status.history[0].message", "status.history[0].figures",
		"status.change.touched", "status.change.restartBaselines", "status.change.canary.pods", "status.breach.figures"} {
		assert.Contains(t, err.Error(), field)
	}

	cut := fitStatus(&rsr.Status)
	assert.NotEmpty(t, cut)
	require.NoError(t, c.Status().Update(ctx, rsr), "the fitted status is accepted")
	got := kubetest.GetRSR(t, c, ns, "web")
	ch := got.Status.Change
	require.Len(t, ch.Touched, v1alpha1.MaxTouched)
	assert.Equal(t, "Deployment", ch.Touched[0].Kind, "the workload is kept")
	assert.Equal(t, int32(2001-v1alpha1.MaxTouched), ch.TouchedOmitted)
	assert.Len(t, ch.RestartBaselines, v1alpha1.MaxBaselines)
	assert.Equal(t, canary[:v1alpha1.MaxCanaryPods], ch.Canary.Pods, "the canary keeps its first pods")
	h := got.Status.History[0]
	assert.LessOrEqual(t, len(h.Message), v1alpha1.MaxActionMessageLength)
	assert.Regexp(t, `… \(and \d+ more bytes\)$`, h.Message)
	assert.True(t, utf8.ValidString(h.Message))
	require.Len(t, h.Figures, v1alpha1.MaxFigures)
	assert.Equal(t, "… and 5 more figures", h.Figures[v1alpha1.MaxFigures-1])
	assert.LessOrEqual(t, len(h.Figures[0]), v1alpha1.MaxFigureLength)
	assert.Len(t, got.Status.Breach.Figures, v1alpha1.MaxFigures)
	assert.LessOrEqual(t, len(got.Status.Rollback.Message), v1alpha1.MaxRollbackMessageLength)
	assert.LessOrEqual(t, len(got.Status.Message), v1alpha1.MaxStatusMessageLength)
}

// TestCutsSayWhatTheyLeaveOut: fit, cutTo and joinFit stay within their
// bound and cut on a rune boundary; fit and joinFit count what they leave
// out; capTouched keeps the objects that are not pods.
func TestCutsSayWhatTheyLeaveOut(t *testing.T) {
	s := strings.Repeat("日本", 1000) // three bytes a rune
	for _, n := range []int{0, 5, 30, 31, 32, 100, 4096} {
		got := fit(s, n)
		assert.LessOrEqual(t, len(got), max(n, len(moreBytes(len(s)))), "n=%d", n)
		require.True(t, utf8.ValidString(got), "n=%d", n)
		m := regexp.MustCompile(`^(.*)… \(and (\d+) more bytes\)$`).FindStringSubmatch(got)
		require.NotNil(t, m, got)
		left, _ := strconv.Atoi(m[2])
		assert.Equal(t, len(s), len(m[1])+left, "n=%d: the count is what was left out", n)
	}
	assert.Equal(t, "short", fit("short", 5))
	// The refusals' mark, "…" alone, is cut the same way.
	for _, n := range []int{3, 4, 5, 256, 1024} {
		got := cutTo(s, n, ellipsis)
		assert.LessOrEqual(t, len(got), n, "n=%d", n)
		require.True(t, utf8.ValidString(got), "n=%d", n)
		prefix, ok := strings.CutSuffix(got, "…")
		require.True(t, ok, got)
		assert.True(t, strings.HasPrefix(s, prefix), "n=%d", n)
		assert.Greater(t, len(prefix), n-len("…")-utf8.UTFMax, "n=%d: only a partial rune is dropped", n)
	}

	items := make([]string, 40)
	for i := range items {
		items[i] = fmt.Sprintf("pod web-%02d: Rejected: %s", i, strings.Repeat("x", 200))
	}
	got := joinFit(items, "; ", 4096, "pods")
	assert.LessOrEqual(t, len(got), 4096)
	m := regexp.MustCompile(`; … \(and (\d+) more pods\)$`).FindStringSubmatch(got)
	require.NotNil(t, m, got)
	more, _ := strconv.Atoi(m[1])
	assert.Equal(t, 40, strings.Count(got, ": Rejected: ")+more)
	assert.Equal(t, "a; b", joinFit([]string{"a", "b"}, "; ", 10, "pods"))

	touched := []v1alpha1.TouchedObject{{Kind: "Deployment", Name: "web"}}
	for i := range 1500 {
		touched = append(touched, v1alpha1.TouchedObject{Kind: "Pod", Name: strconv.Itoa(i)})
	}
	touched = append(touched, v1alpha1.TouchedObject{Kind: "HorizontalPodAutoscaler", Name: "web"})
	kept, omitted := capTouched(touched)
	require.Len(t, kept, v1alpha1.MaxTouched)
	assert.Equal(t, int32(1502-v1alpha1.MaxTouched), omitted)
	assert.Equal(t, "Deployment", kept[0].Kind)
	assert.Equal(t, "HorizontalPodAutoscaler", kept[v1alpha1.MaxTouched-1].Kind)
	assert.Equal(t, "1021", kept[v1alpha1.MaxTouched-2].Name)
	small, none := capTouched(touched[:10])
	assert.Len(t, small, 10)
	assert.Zero(t, none)
}
