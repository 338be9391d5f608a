package store

import (
	"cmp"
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"

	hubv1 "github.com/kerf-dev/kerf/api/hub/v1"
	"github.com/kerf-dev/kerf/api/v1alpha1"
)

// KeyConflictError is a batch action whose idempotency key the hub already
// stored with other content: a leader bug, or two writers sharing a
// cluster's name. The batch is refused whole.
type KeyConflictError struct {
	// Index is the action's index in the batch.
	Index int
	// Key is the reused key.
	Key string
}

func (e *KeyConflictError) Error() string {
	return fmt.Sprintf("actions[%d].key %q: already stored with other content; a key names one action", e.Index, e.Key)
}

// body is the part of an action stored as JSON: what no query filters on.
type body struct {
	Message    string                          `json:"message"`
	Resources  []v1alpha1.ResourceName         `json:"resources"`
	Containers []v1alpha1.ContainerValueChange `json:"containers"`
	Figures    []string                        `json:"figures"`
}

// WorkloadID is the stable opaque id of a workload: a hash of its cluster,
// namespace, kind and name, the same on every replica and after restarts.
func WorkloadID(cluster, namespace string, kind v1alpha1.WorkloadKind, name string) string {
	sum := sha256.Sum256([]byte(cluster + "\x00" + namespace + "\x00" + string(kind) + "\x00" + name))
	return "w" + hex.EncodeToString(sum[:12])
}

// digest identifies an action's content, to tell a replay from a reused key.
func digest(a *hubv1.Action) (string, error) {
	b, err := json.Marshal(a)
	if err != nil {
		return "", fmt.Errorf("encode action %q: %w", a.Key, err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]), nil
}

type countKey struct{ typ, reason, resource string }

type newest struct {
	id        int64
	time, seq int64
	a         *hubv1.Action
}

// Ingest stores a batch of the cluster's actions in one transaction: every
// new action, the counters, each workload's newest action, and the
// cluster's contact time and leader report. An action whose key is stored
// already with the same content is a duplicate and changes nothing; with
// other content it fails the batch with a *KeyConflictError. The batch must
// be valid (the hub checks it first); an unregistered cluster is
// ErrNotFound.
func (s *Store) Ingest(ctx context.Context, cluster string, b *hubv1.Batch) (hubv1.BatchResult, error) {
	res := hubv1.BatchResult{Actions: make([]hubv1.ActionResult, 0, len(b.Actions))}
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		now := s.now().UnixNano()
		r, err := tx.ExecContext(ctx, s.q(`UPDATE clusters SET last_contact = ?, leader_identity = ?, agents_connected = ?, undelivered = ?, lag_seconds = ? WHERE name = ?`),
			now, b.Leader.Identity, b.Leader.AgentsConnected, b.Leader.Undelivered, b.Leader.LagSeconds, cluster)
		if err != nil {
			return fmt.Errorf("update cluster: %w", err)
		}
		if n, err := r.RowsAffected(); err != nil {
			return fmt.Errorf("update cluster: %w", err)
		} else if n == 0 {
			return fmt.Errorf("cluster %q: %w", cluster, ErrNotFound)
		}
		if len(b.Actions) == 0 {
			return nil
		}
		insert, err := tx.PrepareContext(ctx, s.q(`INSERT INTO actions
			(cluster, key, digest, workload_id, seq, time, type, reason, namespace, recommendation, kind, name, phase, body, received_at)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT (cluster, key) DO NOTHING RETURNING id`))
		if err != nil {
			return fmt.Errorf("prepare insert: %w", err)
		}
		defer insert.Close()
		counts := map[countKey]int64{}
		latest := map[string]newest{}
		for i := range b.Actions {
			a := &b.Actions[i]
			dig, err := digest(a)
			if err != nil {
				return err
			}
			bb, err := json.Marshal(body{Message: a.Message, Resources: a.Resources, Containers: a.Containers, Figures: a.Figures})
			if err != nil {
				return fmt.Errorf("encode actions[%d]: %w", i, err)
			}
			wid := WorkloadID(cluster, a.Namespace, a.Workload.Kind, a.Workload.Name)
			t := a.Time.UnixNano()
			var id int64
			err = insert.QueryRowContext(ctx, cluster, a.Key, dig, wid, a.Seq, t, string(a.Type), a.Reason, a.Namespace,
				a.Recommendation, string(a.Workload.Kind), a.Workload.Name, string(a.Phase), string(bb), now).Scan(&id)
			if errors.Is(err, sql.ErrNoRows) {
				var stored string
				err := tx.QueryRowContext(ctx, s.q("SELECT digest FROM actions WHERE cluster = ? AND key = ?"), cluster, a.Key).Scan(&stored)
				if err != nil && !errors.Is(err, sql.ErrNoRows) {
					return fmt.Errorf("read stored action %q: %w", a.Key, err)
				}
				if err == nil && stored != dig {
					return &KeyConflictError{Index: i, Key: a.Key}
				}
				res.Duplicates++
				res.Actions = append(res.Actions, hubv1.ActionResult{Key: a.Key, Status: hubv1.StatusDuplicate})
				continue
			}
			if err != nil {
				return fmt.Errorf("insert actions[%d]: %w", i, err)
			}
			res.Stored++
			res.Actions = append(res.Actions, hubv1.ActionResult{Key: a.Key, Status: hubv1.StatusStored})
			if len(a.Resources) == 0 {
				counts[countKey{string(a.Type), a.Reason, ""}]++
			}
			for _, r := range a.Resources {
				counts[countKey{string(a.Type), a.Reason, string(r)}]++
			}
			if n, ok := latest[wid]; !ok || t > n.time || (t == n.time && a.Seq > n.seq) {
				latest[wid] = newest{id: id, time: t, seq: a.Seq, a: a}
			}
		}
		// Rows are upserted in key order, so that two transactions on
		// PostgreSQL lock them in the same order and cannot deadlock.
		for _, k := range slices.SortedFunc(maps.Keys(counts), func(x, y countKey) int {
			return cmp.Or(cmp.Compare(x.typ, y.typ), cmp.Compare(x.reason, y.reason), cmp.Compare(x.resource, y.resource))
		}) {
			if _, err := tx.ExecContext(ctx, s.q(`INSERT INTO action_counts (cluster, type, reason, resource, count) VALUES (?, ?, ?, ?, ?)
				ON CONFLICT (cluster, type, reason, resource) DO UPDATE SET count = action_counts.count + excluded.count`),
				cluster, k.typ, k.reason, k.resource, counts[k]); err != nil {
				return fmt.Errorf("count actions: %w", err)
			}
		}
		for _, wid := range slices.Sorted(maps.Keys(latest)) {
			n := latest[wid]
			if _, err := tx.ExecContext(ctx, s.q(`INSERT INTO workloads (id, cluster, namespace, kind, name, phase, last_action, last_time, last_seq)
				VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
				ON CONFLICT (id) DO UPDATE SET phase = excluded.phase, last_action = excluded.last_action,
					last_time = excluded.last_time, last_seq = excluded.last_seq
				WHERE excluded.last_time > workloads.last_time
					OR (excluded.last_time = workloads.last_time AND excluded.last_seq > workloads.last_seq)`),
				wid, cluster, n.a.Namespace, string(n.a.Workload.Kind), n.a.Workload.Name, string(n.a.Phase), n.id, n.time, n.seq); err != nil {
				return fmt.Errorf("update workload %s/%s/%s: %w", n.a.Namespace, n.a.Workload.Kind, n.a.Workload.Name, err)
			}
		}
		return nil
	})
	if err != nil {
		return hubv1.BatchResult{}, fmt.Errorf("store batch of cluster %q: %w", cluster, err)
	}
	return res, nil
}
