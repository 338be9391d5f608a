package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// ErrRemoved is returned when adding a token to, or registering again, a
// cluster that was removed with its actions kept.
var ErrRemoved = errors.New("removed")

// Removal is what RemoveCluster did.
type Removal struct {
	// TokensRevoked is how many of the cluster's tokens were deleted.
	TokensRevoked int64
	// RemovedAt is when the cluster was removed (now, or by an earlier
	// removal without purge).
	RemovedAt time.Time
	// Purged says its actions, workloads, counters and registration were
	// deleted.
	Purged bool
	// ActionsDeleted is how many actions the purge deleted.
	ActionsDeleted int64
}

// RemoveCluster removes a registered cluster. In one transaction it
// deletes every token of the cluster (a write with one of them is refused
// from then on, by every replica), deletes its savings report and marks
// the cluster removed, which also
// refuses a write already authenticated. Without purge that is all: the
// cluster's actions, workloads and counters stay readable, and its name
// stays taken. With purge it then deletes the actions in chunks (as
// retention does, so no transaction holds millions of rows), the
// workloads, the counters and the registration; a purge interrupted
// midway is finished by running it again. An unknown cluster is
// ErrNotFound; a cluster already removed is ErrRemoved unless purge is
// asked.
func (s *Store) RemoveCluster(ctx context.Context, name string, purge bool) (Removal, error) {
	var out Removal
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		var removed sql.NullInt64
		err := tx.QueryRowContext(ctx, s.q("SELECT removed_at FROM clusters WHERE name = ?"), name).Scan(&removed)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("cluster %q is not registered (kerf-hub clusters list): %w", name, ErrNotFound)
		}
		if err != nil {
			return fmt.Errorf("look up cluster: %w", err)
		}
		if removed.Valid {
			out.RemovedAt = time.Unix(0, removed.Int64).UTC()
			if !purge {
				return fmt.Errorf("cluster %q was removed at %s with its actions kept (--purge deletes them): %w", name, out.RemovedAt.Format(time.RFC3339), ErrRemoved)
			}
		} else {
			now := s.now()
			if _, err := tx.ExecContext(ctx, s.q("UPDATE clusters SET removed_at = ? WHERE name = ?"), now.UnixNano(), name); err != nil {
				return fmt.Errorf("mark cluster removed: %w", err)
			}
			out.RemovedAt = now.UTC()
		}
		// Its savings report is what the cluster looked like, not an
		// audit record: it goes with the cluster.
		if _, err := tx.ExecContext(ctx, s.q("DELETE FROM savings WHERE cluster = ?"), name); err != nil {
			return fmt.Errorf("delete savings report: %w", err)
		}
		if _, err := tx.ExecContext(ctx, s.q("UPDATE clusters SET savings_reported_at = NULL WHERE name = ?"), name); err != nil {
			return fmt.Errorf("delete savings report: %w", err)
		}
		res, err := tx.ExecContext(ctx, s.q("DELETE FROM tokens WHERE cluster = ?"), name)
		if err != nil {
			return fmt.Errorf("revoke tokens: %w", err)
		}
		if out.TokensRevoked, err = res.RowsAffected(); err != nil {
			return fmt.Errorf("revoke tokens: %w", err)
		}
		return nil
	})
	if err != nil {
		return out, fmt.Errorf("remove cluster %q: %w", name, err)
	}
	if !purge {
		return out, nil
	}
	for {
		res, err := s.db.ExecContext(ctx, s.q("DELETE FROM actions WHERE id IN (SELECT id FROM actions WHERE cluster = ? LIMIT ?)"), name, retentionChunk)
		if err != nil {
			return out, fmt.Errorf("purge cluster %q: delete actions (%d deleted so far; run it again to finish): %w", name, out.ActionsDeleted, err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return out, fmt.Errorf("purge cluster %q: delete actions: %w", name, err)
		}
		out.ActionsDeleted += n
		if n < retentionChunk {
			break
		}
	}
	err = s.inTx(ctx, func(tx *sql.Tx) error {
		for _, q := range []string{"DELETE FROM workloads WHERE cluster = ?", "DELETE FROM action_counts WHERE cluster = ?", "DELETE FROM actions WHERE cluster = ?", "DELETE FROM clusters WHERE name = ?"} {
			if _, err := tx.ExecContext(ctx, s.q(q), name); err != nil {
				return fmt.Errorf("%s: %w", q, err)
			}
		}
		return nil
	})
	if err != nil {
		return out, fmt.Errorf("purge cluster %q: %w", name, err)
	}
	out.Purged = true
	return out, nil
}

// refuseRemoved returns ErrRemoved, with when and what to do, if the
// cluster was removed with its actions kept.
func (s *Store) refuseRemoved(ctx context.Context, tx *sql.Tx, name string) error {
	var removed sql.NullInt64
	err := tx.QueryRowContext(ctx, s.q("SELECT removed_at FROM clusters WHERE name = ?"), name).Scan(&removed)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("look up cluster: %w", err)
	}
	if removed.Valid {
		return fmt.Errorf("cluster %q was removed at %s and its actions kept; 'kerf-hub clusters remove %s --purge' deletes them and frees the name: %w",
			name, time.Unix(0, removed.Int64).UTC().Format(time.RFC3339), name, ErrRemoved)
	}
	return nil
}
