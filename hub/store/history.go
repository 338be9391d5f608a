package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"

	hubv1 "github.com/kerf-dev/kerf/api/hub/v1"
)

// MaxHistory is the most actions WorkloadHistory returns.
const MaxHistory = 1000

// WorkloadHistory returns the workload with the stable id (WorkloadID) and
// its newest limit actions, oldest first (a timeline's order), and true
// when older ones were left out. An unknown id is ErrNotFound; limit is
// from 1 to MaxHistory.
func (s *Store) WorkloadHistory(ctx context.Context, id string, limit int) (hubv1.Workload, []hubv1.Entry, bool, error) {
	if limit < 1 || limit > MaxHistory {
		return hubv1.Workload{}, nil, false, fmt.Errorf("history of workload %s: limit %d must be from 1 to %d", id, limit, MaxHistory)
	}
	wl, err := s.Workload(ctx, id)
	if err != nil {
		return wl, nil, false, err
	}
	items, next, err := s.Actions(ctx, ActionQuery{WorkloadID: id, Limit: limit})
	if err != nil {
		return wl, nil, false, fmt.Errorf("history of workload %s: %w", id, err)
	}
	slices.Reverse(items)
	return wl, items, next != nil, nil
}

// WorkloadOfRecommendation returns the stable id of the workload that the
// recommendation (cluster, namespace, name) acted on last, for pages that
// name a recommendation, as the leader's do. One the hub has no action of
// is ErrNotFound.
func (s *Store) WorkloadOfRecommendation(ctx context.Context, cluster, namespace, name string) (string, error) {
	var id string
	err := s.db.QueryRowContext(ctx, s.q("SELECT workload_id FROM actions WHERE cluster = ? AND namespace = ? AND recommendation = ? ORDER BY time DESC, seq DESC, id DESC LIMIT 1"),
		cluster, namespace, name).Scan(&id)
	if errors.Is(err, sql.ErrNoRows) {
		return "", fmt.Errorf("recommendation %s/%s/%s: %w", cluster, namespace, name, ErrNotFound)
	}
	if err != nil {
		return "", fmt.Errorf("find the workload of recommendation %s/%s/%s: %w", cluster, namespace, name, err)
	}
	return id, nil
}
