package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	hubv1 "github.com/kerf-dev/kerf/api/hub/v1"
	"github.com/kerf-dev/kerf/api/v1alpha1"
)

// Position places an action in the read API's order: time, then seq (its
// place in its workload), then the database's id, all newest first.
type Position struct {
	// Time is the action's time in Unix nanoseconds.
	Time int64
	// Seq is the action's seq.
	Seq int64
	// ID is the row's id, unique in the database.
	ID int64
}

// ActionQuery selects actions; zero fields select everything.
type ActionQuery struct {
	// Types keeps actions of these types.
	Types []v1alpha1.ActionType
	// Cluster, Namespace and Reason keep actions with exactly that value.
	Cluster, Namespace, Reason string
	// WorkloadID keeps one workload's actions.
	WorkloadID string
	// Since keeps actions at or after it.
	Since time.Time
	// After resumes after the previous page's last action.
	After *Position
	// Limit is the page size; it must be positive.
	Limit int
}

const actionColumns = "id, cluster, workload_id, seq, time, type, reason, namespace, recommendation, kind, name, body"

// Actions returns a page of the actions q selects, newest first, and the
// position of its last one when more follow (nil on the last page).
func (s *Store) Actions(ctx context.Context, q ActionQuery) ([]hubv1.Entry, *Position, error) {
	var where []string
	var args []any
	if len(q.Types) > 0 {
		where = append(where, "type IN (?"+strings.Repeat(", ?", len(q.Types)-1)+")")
		for _, t := range q.Types {
			args = append(args, string(t))
		}
	}
	for _, f := range []struct{ col, v string }{{"cluster", q.Cluster}, {"namespace", q.Namespace}, {"reason", q.Reason}, {"workload_id", q.WorkloadID}} {
		if f.v != "" {
			where = append(where, f.col+" = ?")
			args = append(args, f.v)
		}
	}
	if !q.Since.IsZero() {
		where = append(where, "time >= ?")
		args = append(args, q.Since.UnixNano())
	}
	if p := q.After; p != nil {
		where = append(where, "(time, seq, id) < (?, ?, ?)")
		args = append(args, p.Time, p.Seq, p.ID)
	}
	query := "SELECT " + actionColumns + " FROM actions"
	if len(where) > 0 {
		query += " WHERE " + strings.Join(where, " AND ")
	}
	query += " ORDER BY time DESC, seq DESC, id DESC LIMIT ?"
	args = append(args, q.Limit+1)
	rows, err := s.db.QueryContext(ctx, s.q(query), args...)
	if err != nil {
		return nil, nil, fmt.Errorf("query actions: %w", err)
	}
	defer rows.Close()
	items := make([]hubv1.Entry, 0, min(q.Limit, 1024))
	var positions []Position
	for rows.Next() {
		e, p, err := scanEntry(rows)
		if err != nil {
			return nil, nil, fmt.Errorf("query actions: %w", err)
		}
		items = append(items, e)
		positions = append(positions, p)
	}
	if err := rows.Err(); err != nil {
		return nil, nil, fmt.Errorf("query actions: %w", err)
	}
	if len(items) > q.Limit {
		return items[:q.Limit], &positions[q.Limit-1], nil
	}
	return items, nil, nil
}

type scanner interface{ Scan(dest ...any) error }

func scanEntry(r scanner) (hubv1.Entry, Position, error) {
	var e hubv1.Entry
	var p Position
	var typ, kind, bb string
	if err := r.Scan(&p.ID, &e.Cluster, &e.WorkloadID, &e.Seq, &p.Time, &typ, &e.Reason, &e.Namespace, &e.Recommendation, &kind, &e.Workload.Name, &bb); err != nil {
		return e, p, err
	}
	p.Seq = e.Seq
	e.Time = metav1.NewTime(time.Unix(0, p.Time).UTC())
	e.Type = v1alpha1.ActionType(typ)
	e.Workload.Kind = v1alpha1.WorkloadKind(kind)
	var b body
	if err := json.Unmarshal([]byte(bb), &b); err != nil {
		return e, p, fmt.Errorf("decode action %d: %w", p.ID, err)
	}
	e.Message = b.Message
	e.Resources = nonNil(b.Resources)
	e.Containers = nonNil(b.Containers)
	e.Figures = nonNil(b.Figures)
	e.Refusals = b.Refusals
	return e, p, nil
}

// WorkloadKey places a workload in GET /v1/workloads' order.
type WorkloadKey struct {
	// Cluster, Namespace, Kind and Name name the workload.
	Cluster, Namespace, Kind, Name string
}

// WorkloadQuery selects workloads; zero fields select everything.
type WorkloadQuery struct {
	// Cluster and Namespace keep workloads with exactly that value.
	Cluster, Namespace string
	// Phase keeps workloads in that phase.
	Phase v1alpha1.Phase
	// After resumes after the previous page's last workload.
	After *WorkloadKey
	// Limit is the page size; it must be positive.
	Limit int
}

const workloadColumns = "w.id, w.cluster, w.namespace, w.kind, w.name, w.phase, a." + "id, a.cluster, a.workload_id, a.seq, a.time, a.type, a.reason, a.namespace, a.recommendation, a.kind, a.name, a.body"

// Workloads returns a page of the workloads q selects, by cluster,
// namespace, kind and name, each with its newest action, and the key of its
// last one when more follow.
func (s *Store) Workloads(ctx context.Context, q WorkloadQuery) ([]hubv1.Workload, *WorkloadKey, error) {
	var where []string
	var args []any
	for _, f := range []struct{ col, v string }{{"w.cluster", q.Cluster}, {"w.namespace", q.Namespace}, {"w.phase", string(q.Phase)}} {
		if f.v != "" {
			where = append(where, f.col+" = ?")
			args = append(args, f.v)
		}
	}
	if k := q.After; k != nil {
		where = append(where, "(w.cluster, w.namespace, w.kind, w.name) > (?, ?, ?, ?)")
		args = append(args, k.Cluster, k.Namespace, k.Kind, k.Name)
	}
	query := "SELECT " + workloadColumns + " FROM workloads w JOIN actions a ON a.id = w.last_action"
	if len(where) > 0 {
		query += " WHERE " + strings.Join(where, " AND ")
	}
	query += " ORDER BY w.cluster, w.namespace, w.kind, w.name LIMIT ?"
	args = append(args, q.Limit+1)
	rows, err := s.db.QueryContext(ctx, s.q(query), args...)
	if err != nil {
		return nil, nil, fmt.Errorf("query workloads: %w", err)
	}
	defer rows.Close()
	items := []hubv1.Workload{}
	for rows.Next() {
		w, err := scanWorkload(rows)
		if err != nil {
			return nil, nil, fmt.Errorf("query workloads: %w", err)
		}
		items = append(items, w)
	}
	if err := rows.Err(); err != nil {
		return nil, nil, fmt.Errorf("query workloads: %w", err)
	}
	if len(items) > q.Limit {
		w := items[q.Limit-1]
		return items[:q.Limit], &WorkloadKey{Cluster: w.Cluster, Namespace: w.Namespace, Kind: string(w.Kind), Name: w.Name}, nil
	}
	return items, nil, nil
}

// Workload returns the workload with the id; an unknown id is ErrNotFound.
func (s *Store) Workload(ctx context.Context, id string) (hubv1.Workload, error) {
	row := s.db.QueryRowContext(ctx, s.q("SELECT "+workloadColumns+" FROM workloads w JOIN actions a ON a.id = w.last_action WHERE w.id = ?"), id)
	w, err := scanWorkload(row)
	if errors.Is(err, sql.ErrNoRows) {
		return w, fmt.Errorf("workload %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return w, fmt.Errorf("read workload %s: %w", id, err)
	}
	return w, nil
}

// rowScanner adapts the workload's leading columns and the action's.
type rowScanner struct {
	r    scanner
	head []any
}

func (rs rowScanner) Scan(dest ...any) error { return rs.r.Scan(append(rs.head, dest...)...) }

func scanWorkload(r scanner) (hubv1.Workload, error) {
	var w hubv1.Workload
	var kind, phase string
	e, _, err := scanEntry(rowScanner{r: r, head: []any{&w.ID, &w.Cluster, &w.Namespace, &kind, &w.Name, &phase}})
	if err != nil {
		return w, err
	}
	w.Kind = v1alpha1.WorkloadKind(kind)
	w.Phase = v1alpha1.Phase(phase)
	w.LastAction = e
	return w, nil
}

// Clusters lists the registered clusters by name with their last contact,
// their leader's last report and, for a cluster removed with its actions
// kept, when it was removed.
func (s *Store) Clusters(ctx context.Context) ([]hubv1.Cluster, error) {
	rows, err := s.db.QueryContext(ctx, "SELECT name, registered_at, last_contact, leader_identity, agents_connected, undelivered, lag_seconds, removed_at FROM clusters ORDER BY name")
	if err != nil {
		return nil, fmt.Errorf("list clusters: %w", err)
	}
	defer rows.Close()
	out := []hubv1.Cluster{}
	for rows.Next() {
		var c hubv1.Cluster
		var registered int64
		var contact, removed sql.NullInt64
		var rep hubv1.LeaderReport
		if err := rows.Scan(&c.Name, &registered, &contact, &rep.Identity, &rep.AgentsConnected, &rep.Undelivered, &rep.LagSeconds, &removed); err != nil {
			return nil, fmt.Errorf("list clusters: %w", err)
		}
		c.RegisteredAt = metav1.NewTime(time.Unix(0, registered).UTC())
		if contact.Valid {
			t := metav1.NewTime(time.Unix(0, contact.Int64).UTC())
			c.LastContact = &t
			c.Leader = &rep
		}
		if removed.Valid {
			t := metav1.NewTime(time.Unix(0, removed.Int64).UTC())
			c.RemovedAt = &t
		}
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list clusters: %w", err)
	}
	return out, nil
}

// Count is one series of kerf_actions_total.
type Count struct {
	// Cluster, Type, Reason and Resource are the series' labels.
	Cluster, Type, Reason, Resource string
	// Value is how many actions were stored, each once.
	Value int64
}

// Counts reads the action counters, which every replica shares.
func (s *Store) Counts(ctx context.Context) ([]Count, error) {
	rows, err := s.db.QueryContext(ctx, "SELECT cluster, type, reason, resource, count FROM action_counts ORDER BY cluster, type, reason, resource")
	if err != nil {
		return nil, fmt.Errorf("read action counts: %w", err)
	}
	defer rows.Close()
	var out []Count
	for rows.Next() {
		var c Count
		if err := rows.Scan(&c.Cluster, &c.Type, &c.Reason, &c.Resource, &c.Value); err != nil {
			return nil, fmt.Errorf("read action counts: %w", err)
		}
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read action counts: %w", err)
	}
	return out, nil
}

// retentionChunk is how many rows one retention statement deletes, so that
// no transaction holds a lock on millions of rows.
const retentionChunk = 5000

// DeleteBefore deletes the actions older than cutoff, and the workloads
// whose newest action is, in chunks; it returns how many actions went. The
// counters stay: kerf_actions_total never goes down.
func (s *Store) DeleteBefore(ctx context.Context, cutoff time.Time) (int64, error) {
	var total int64
	for {
		res, err := s.db.ExecContext(ctx, s.q("DELETE FROM actions WHERE id IN (SELECT id FROM actions WHERE time < ? ORDER BY time LIMIT ?)"), cutoff.UnixNano(), retentionChunk)
		if err != nil {
			return total, fmt.Errorf("delete actions before %s: %w", cutoff.Format(time.RFC3339), err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return total, fmt.Errorf("delete actions before %s: %w", cutoff.Format(time.RFC3339), err)
		}
		total += n
		if n < retentionChunk {
			break
		}
	}
	// A workload's newest action is its last_time; if that went, all went.
	if _, err := s.db.ExecContext(ctx, s.q("DELETE FROM workloads WHERE last_time < ?"), cutoff.UnixNano()); err != nil {
		return total, fmt.Errorf("delete workloads before %s: %w", cutoff.Format(time.RFC3339), err)
	}
	return total, nil
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}
