package hub

import (
	"testing"

	"github.com/stretchr/testify/assert"

	auditv1 "github.com/kerf-dev/kerf/api/audit/v1"
	hubv1 "github.com/kerf-dev/kerf/api/hub/v1"
	"github.com/kerf-dev/kerf/api/v1alpha1"
)

func TestHistoryOfMapsTheWorkloadAndKeepsTheOrder(t *testing.T) {
	entry := func(typ v1alpha1.ActionType, msg string) hubv1.Entry {
		return hubv1.Entry{Cluster: "east", WorkloadID: "w1", Entry: auditv1.Entry{Type: typ, Message: msg, Recommendation: "web-rsr"}}
	}
	wl := hubv1.Workload{ID: "w1", Cluster: "east", Namespace: "shop", Kind: v1alpha1.KindDeployment, Name: "web",
		Phase: v1alpha1.PhaseRolledBack, LastAction: entry(v1alpha1.ActionRolledBack, "second")}
	h := historyOf(wl, []hubv1.Entry{entry(v1alpha1.ActionApplied, "first"), entry(v1alpha1.ActionRolledBack, "second")}, true)
	assert.Equal(t, "w1", h.ID)
	assert.Equal(t, auditv1.Workload{Kind: v1alpha1.KindDeployment, Name: "web"}, h.Workload)
	assert.Equal(t, "web-rsr", h.Recommendation)
	assert.Equal(t, v1alpha1.PhaseRolledBack, h.Phase)
	assert.True(t, h.RolledBack)
	assert.True(t, h.Truncated)
	assert.Equal(t, []string{"first", "second"}, []string{h.History[0].Message, h.History[1].Message})
}
