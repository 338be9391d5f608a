package hub

import (
	"context"
	"errors"
	"fmt"

	auditv1 "github.com/kerf-dev/kerf/api/audit/v1"
	hubv1 "github.com/kerf-dev/kerf/api/hub/v1"
	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/hub/store"
	"github.com/kerf-dev/kerf/web"
)

// historyLimit is how many of a workload's newest actions its page shows.
const historyLimit = 200

// WorkloadHistory is one workload's history as the hub knows it, in the
// plain shape a workload page takes: no usage, no policy (the hub has
// neither), the phase after its newest action and its actions oldest
// first.
type WorkloadHistory struct {
	// ID is the hub's stable workload id (GET /v1/workloads/{id}/history).
	ID string
	// Cluster, Namespace and Workload name the workload.
	Cluster   string
	Namespace string
	Workload  auditv1.Workload
	// Recommendation is the recommendation of its newest action.
	Recommendation string
	// Phase is the recommendation's phase after the newest action.
	Phase v1alpha1.Phase
	// RolledBack says the newest action is a rollback.
	RolledBack bool
	// History are its actions, oldest first.
	History []auditv1.Entry
	// Truncated says older actions than History's first were left out.
	Truncated bool
}

// WorkloadHistory reads the workload with the stable id and its newest
// actions (at most 200) for its page; an unknown id is store.ErrNotFound.
func (s *Server) WorkloadHistory(ctx context.Context, id string) (WorkloadHistory, error) {
	ctx, cancel := context.WithTimeout(ctx, readTimeout)
	defer cancel()
	wl, items, more, err := s.Store.WorkloadHistory(ctx, id, historyLimit)
	if err != nil {
		return WorkloadHistory{}, err
	}
	return historyOf(wl, items, more), nil
}

// historyOf maps the store's workload and its actions (oldest first) to a
// WorkloadHistory.
func historyOf(wl hubv1.Workload, items []hubv1.Entry, more bool) WorkloadHistory {
	h := WorkloadHistory{
		ID: wl.ID, Cluster: wl.Cluster, Namespace: wl.Namespace,
		Workload:       auditv1.Workload{Kind: wl.Kind, Name: wl.Name},
		Recommendation: wl.LastAction.Recommendation,
		Phase:          wl.Phase,
		RolledBack:     wl.LastAction.Type == v1alpha1.ActionRolledBack,
		History:        make([]auditv1.Entry, len(items)),
		Truncated:      more,
	}
	for i, e := range items {
		h.History[i] = e.Entry
	}
	return h
}

// View is the history as the workload page shows it: the hub knows no
// policy (PolicyUnknown) and keeps no usage, so the chart shows the values
// and the rollbacks alone.
func (h WorkloadHistory) View() web.WorkloadView {
	return web.WorkloadView{
		Cluster: h.Cluster, Namespace: h.Namespace, Recommendation: h.Recommendation,
		Workload: h.Workload, Phase: h.Phase, PolicyUnknown: true, ValuesUnknown: true, History: h.History,
	}
}

// Workload reads the workload page of the recommendation id names: its
// workload's history on the hub. One the hub has no action of wraps
// web.ErrNotFound.
func (u uiSource) Workload(ctx context.Context, id web.WorkloadID) (web.WorkloadView, error) {
	wid, err := u.s.Store.WorkloadOfRecommendation(ctx, id.Cluster, id.Namespace, id.Name)
	if err == nil {
		var h WorkloadHistory
		if h, err = u.s.WorkloadHistory(ctx, wid); err == nil {
			return h.View(), nil
		}
	}
	if errors.Is(err, store.ErrNotFound) {
		return web.WorkloadView{}, fmt.Errorf("%w: %w", web.ErrNotFound, err)
	}
	return web.WorkloadView{}, err
}
