package helm_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"helm.sh/helm/v3/pkg/action"
)

// TestRecommenderWorkersValueSetsTheLeaderFlag: leader.recommenderWorkers
// gives --recommender-workers (8 by default, as in manifests/), the
// schema refuses a value outside 1 to 64 naming the field, and values
// from a chart without the key (helm upgrade --reuse-values) leave the
// flag to its default.
func TestRecommenderWorkersValueSetsTheLeaderFlag(t *testing.T) {
	assert.Contains(t, leaderArgs(t, renderManifest(t, nil)), "--recommender-workers=8")
	assert.Contains(t, leaderArgs(t, renderManifest(t, map[string]any{"leader": map[string]any{"recommenderWorkers": 16}})),
		"--recommender-workers=16")

	for _, bad := range []any{0, 65, "many"} {
		err := renderError(t, map[string]any{"leader": map[string]any{"recommenderWorkers": bad}})
		require.Error(t, err, "leader.recommenderWorkers %v", bad)
		assert.Contains(t, err.Error(), "/leader/recommenderWorkers")
	}

	c := loadChart(t)
	delete(c.Values["leader"].(map[string]any), "recommenderWorkers")
	inst := action.NewInstall(&action.Configuration{})
	inst.ClientOnly, inst.DryRun, inst.ReleaseName, inst.Namespace = true, true, "kerf", "default"
	inst.DisableOpenAPIValidation = true
	rel, err := inst.Run(c, nil)
	require.NoError(t, err)
	assert.NotContains(t, strings.Join(leaderArgs(t, rel.Manifest), " "), "--recommender-workers")
}
