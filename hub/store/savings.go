package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	hubv1 "github.com/kerf-dev/kerf/api/hub/v1"
)

// NamespaceSavings is one namespace's figures from its cluster's latest
// savings report, and when the leader made that report.
type NamespaceSavings struct {
	// Cluster is the reporting cluster.
	Cluster string
	// Reported is the report's time, as the leader gave it.
	Reported time.Time
	hubv1.NamespaceSavings
}

// savingsChunk is how many namespaces one INSERT carries (10 parameters
// each).
const savingsChunk = 200

// PutSavings replaces the cluster's stored savings with report r, in one
// transaction. The cluster's row is locked first, so two reports of one
// cluster are stored one after the other. A report older than the stored
// one changes nothing and answers Superseded. The report must be valid
// (the hub checks it first); an unregistered or removed cluster is
// ErrNotFound.
func (s *Store) PutSavings(ctx context.Context, cluster string, r *hubv1.SavingsReport) (hubv1.SavingsResult, error) {
	var out hubv1.SavingsResult
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		at := r.Time.UnixNano()
		res, err := tx.ExecContext(ctx, s.q(`UPDATE clusters SET savings_reported_at = ?
			WHERE name = ? AND removed_at IS NULL AND (savings_reported_at IS NULL OR savings_reported_at <= ?)`), at, cluster, at)
		if err != nil {
			return fmt.Errorf("update cluster: %w", err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return fmt.Errorf("update cluster: %w", err)
		}
		if n == 0 {
			var removed sql.NullInt64
			err := tx.QueryRowContext(ctx, s.q("SELECT removed_at FROM clusters WHERE name = ?"), cluster).Scan(&removed)
			if errors.Is(err, sql.ErrNoRows) || (err == nil && removed.Valid) {
				return fmt.Errorf("cluster %q: %w", cluster, ErrNotFound)
			}
			if err != nil {
				return fmt.Errorf("look up cluster: %w", err)
			}
			out.Superseded = true
			return nil
		}
		if _, err := tx.ExecContext(ctx, s.q("DELETE FROM savings WHERE cluster = ?"), cluster); err != nil {
			return fmt.Errorf("delete the previous report: %w", err)
		}
		const values = "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
		for chunk := range slices.Chunk(r.Namespaces, savingsChunk) {
			args := make([]any, 0, 10*len(chunk))
			for _, ns := range chunk {
				args = append(args, cluster, ns.Namespace, ns.Workloads, ns.Manifest.CPUMillis, ns.Manifest.MemoryBytes,
					ns.InForce.CPUMillis, ns.InForce.MemoryBytes, ns.Recommended.CPUMillis, ns.Recommended.MemoryBytes, ns.Unrecorded)
			}
			if _, err := tx.ExecContext(ctx, s.q(`INSERT INTO savings (cluster, namespace, workloads, manifest_cpu, manifest_memory,
				in_force_cpu, in_force_memory, recommended_cpu, recommended_memory, unrecorded) VALUES `+
				values+strings.Repeat(", "+values, len(chunk)-1)), args...); err != nil {
				return fmt.Errorf("insert namespaces: %w", err)
			}
		}
		out.Stored = len(r.Namespaces)
		return nil
	})
	if err != nil {
		return hubv1.SavingsResult{}, fmt.Errorf("store savings report of cluster %q: %w", cluster, err)
	}
	return out, nil
}

// SavingsReports returns each cluster's latest report time, by cluster,
// for the clusters that reported (RemoveCluster deletes a report).
func (s *Store) SavingsReports(ctx context.Context) (map[string]time.Time, error) {
	rows, err := s.db.QueryContext(ctx, "SELECT name, savings_reported_at FROM clusters WHERE savings_reported_at IS NOT NULL")
	if err != nil {
		return nil, fmt.Errorf("read savings reports: %w", err)
	}
	defer rows.Close()
	out := map[string]time.Time{}
	for rows.Next() {
		var name string
		var at int64
		if err := rows.Scan(&name, &at); err != nil {
			return nil, fmt.Errorf("read savings reports: %w", err)
		}
		out[name] = time.Unix(0, at).UTC()
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read savings reports: %w", err)
	}
	return out, nil
}

// Savings returns the stored namespaces' figures by cluster and
// namespace: one cluster's, or every cluster's when cluster is empty, and
// one namespace's, or every one's when namespace is empty. A removed
// cluster has none: RemoveCluster deletes them.
func (s *Store) Savings(ctx context.Context, cluster, namespace string) ([]NamespaceSavings, error) {
	query := `SELECT s.cluster, c.savings_reported_at, s.namespace, s.workloads, s.manifest_cpu, s.manifest_memory,
		s.in_force_cpu, s.in_force_memory, s.recommended_cpu, s.recommended_memory, s.unrecorded
		FROM savings s JOIN clusters c ON c.name = s.cluster WHERE TRUE`
	var args []any
	if cluster != "" {
		query += " AND s.cluster = ?"
		args = append(args, cluster)
	}
	if namespace != "" {
		query += " AND s.namespace = ?"
		args = append(args, namespace)
	}
	rows, err := s.db.QueryContext(ctx, s.q(query+" ORDER BY s.cluster, s.namespace"), args...)
	if err != nil {
		return nil, fmt.Errorf("read savings: %w", err)
	}
	defer rows.Close()
	var out []NamespaceSavings
	for rows.Next() {
		var n NamespaceSavings
		var at int64
		if err := rows.Scan(&n.Cluster, &at, &n.Namespace, &n.Workloads, &n.Manifest.CPUMillis, &n.Manifest.MemoryBytes,
			&n.InForce.CPUMillis, &n.InForce.MemoryBytes, &n.Recommended.CPUMillis, &n.Recommended.MemoryBytes, &n.Unrecorded); err != nil {
			return nil, fmt.Errorf("read savings: %w", err)
		}
		n.Reported = time.Unix(0, at).UTC()
		out = append(out, n)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read savings: %w", err)
	}
	return out, nil
}
