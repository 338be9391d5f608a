package store

import (
	"cmp"
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	hubv1 "github.com/kerf-dev/kerf/api/hub/v1"
	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/cluster/recommend"
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
	Refusals   []v1alpha1.Refusal              `json:"refusals,omitempty"`
}

// WorkloadID is the stable opaque id of a workload: a hash of its cluster,
// namespace, kind and name, the same on every replica and after restarts.
func WorkloadID(cluster, namespace string, kind v1alpha1.WorkloadKind, name string) string {
	sum := sha256.Sum256([]byte(cluster + "\x00" + namespace + "\x00" + string(kind) + "\x00" + name))
	return "w" + hex.EncodeToString(sum[:12])
}

// digest identifies an action's content, to tell a replay from a reused
// key: the audit entry only, with empty lists as [] whichever way they came.
// Seq and phase are left out: a leader that resends after a failover may
// see the recommendation in a later phase, and the action is the same.
func digest(a *hubv1.Action) (string, error) {
	e := a.Entry
	e.Resources, e.Containers, e.Figures = nonNil(e.Resources), nonNil(e.Containers), nonNil(e.Figures)
	b, err := json.Marshal(e)
	if err != nil {
		return "", fmt.Errorf("encode action %q: %w", a.Key, err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]), nil
}

type countKey struct{ typ, reason, resource string }

// OtherReason is the reason label of the actions whose reason Kerf does
// not record (CountedReason).
const OtherReason = "Other"

// knownReasons are the reasons a leader records on an action: the health
// watch's verdicts, the blocks, the failures, the strategies of an apply,
// and the recommender's refusals (cluster/recommend's Reason values).
var knownReasons = map[string]bool{
	"":                          true,
	v1alpha1.HealthWatchHealthy: true, v1alpha1.HealthWatchOOMKills: true, v1alpha1.HealthWatchRestarts: true,
	v1alpha1.HealthWatchThrottling: true, v1alpha1.HealthWatchNotAdopted: true, v1alpha1.HealthWatchUnschedulable: true,
	v1alpha1.ResizeInfeasible: true, v1alpha1.ResizeDeferred: true, v1alpha1.ResizeInProgress: true, v1alpha1.ResizeRejected: true,
	v1alpha1.ReasonPaused: true, v1alpha1.ReasonFreezeWindow: true, v1alpha1.ReasonCooldown: true, v1alpha1.ReasonSameValues: true,
	v1alpha1.ReasonFailedPermanent: true, v1alpha1.ReasonNoPolicy: true, v1alpha1.ReasonWatchRunning: true,
	v1alpha1.ReasonRollbackError: true, v1alpha1.ReasonDegraded: true,
	// Deferred is also ResizeDeferred.
	string(v1alpha1.StrategyInPlace): true, string(v1alpha1.StrategyRollout): true,
	string(recommend.ReasonOOMKill): true, string(recommend.ReasonThrottled): true,
	string(recommend.ReasonUpscaleOnly): true, string(recommend.ReasonMinChange): true,
}

// CountedReason is the reason label an action is counted under in
// kerf_actions_total: its reason when Kerf records it, else OtherReason.
// A metric label lives as long as the hub, and a writer's free text
// would make one each (the action keeps its reason either way).
func CountedReason(reason string) string {
	if knownReasons[reason] {
		return reason
	}
	return OtherReason
}

type newest struct {
	id        int64
	time, seq int64
	a         *hubv1.Action
}

// row is an action ready to insert.
type row struct {
	a      *hubv1.Action
	digest string
	body   string
	wid    string
}

// insertChunk is how many actions one INSERT statement carries (15
// parameters each, well under SQLite's and PostgreSQL's limits).
const insertChunk = 200

// insertActions inserts the rows whose key is new, a chunk per statement,
// and returns the ids of those inserted by key. A key that appears twice
// in the rows is inserted once.
func (s *Store) insertActions(ctx context.Context, tx *sql.Tx, cluster string, now int64, rows []row) (map[string]int64, error) {
	const cols = "(cluster, key, digest, workload_id, seq, time, type, reason, namespace, recommendation, kind, name, phase, body, received_at)"
	const values = "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
	ids := make(map[string]int64, len(rows))
	for chunk := range slices.Chunk(rows, insertChunk) {
		query := "INSERT INTO actions " + cols + " VALUES " + values + strings.Repeat(", "+values, len(chunk)-1) +
			" ON CONFLICT (cluster, key) DO NOTHING RETURNING id, key"
		args := make([]any, 0, 15*len(chunk))
		for _, r := range chunk {
			a := r.a
			args = append(args, cluster, a.Key, r.digest, r.wid, a.Seq, a.Time.UnixNano(), string(a.Type), a.Reason, a.Namespace,
				a.Recommendation, string(a.Workload.Kind), a.Workload.Name, string(a.Phase), r.body, now)
		}
		res, err := tx.QueryContext(ctx, s.q(query), args...)
		if err != nil {
			return nil, fmt.Errorf("insert actions: %w", err)
		}
		for res.Next() {
			var id int64
			var key string
			if err := res.Scan(&id, &key); err != nil {
				_ = res.Close()
				return nil, fmt.Errorf("insert actions: %w", err)
			}
			ids[key] = id
		}
		if err := res.Close(); err != nil {
			return nil, fmt.Errorf("insert actions: %w", err)
		}
		if err := res.Err(); err != nil {
			return nil, fmt.Errorf("insert actions: %w", err)
		}
	}
	return ids, nil
}

// storedDigests returns the digests of the keys already stored for the
// cluster (a key not found is absent from the map).
func (s *Store) storedDigests(ctx context.Context, tx *sql.Tx, cluster string, keys []string) (map[string]string, error) {
	out := map[string]string{}
	for chunk := range slices.Chunk(keys, 500) {
		args := []any{cluster}
		for _, k := range chunk {
			args = append(args, k)
		}
		rows, err := tx.QueryContext(ctx, s.q("SELECT key, digest FROM actions WHERE cluster = ? AND key IN (?"+strings.Repeat(", ?", len(chunk)-1)+")"), args...)
		if err != nil {
			return nil, fmt.Errorf("read stored actions: %w", err)
		}
		for rows.Next() {
			var k, d string
			if err := rows.Scan(&k, &d); err != nil {
				_ = rows.Close()
				return nil, fmt.Errorf("read stored actions: %w", err)
			}
			out[k] = d
		}
		if err := rows.Close(); err != nil {
			return nil, fmt.Errorf("read stored actions: %w", err)
		}
	}
	return out, nil
}

// Ingest stores a batch of the cluster's actions in one transaction: every
// new action, the counters, each workload's newest action, and the
// cluster's contact time and leader report. An action whose key is stored
// already with the same content is a duplicate and changes nothing; with
// other content it fails the batch with a *KeyConflictError. The batch must
// be valid (the hub checks it first); an unregistered or removed cluster is
// ErrNotFound.
func (s *Store) Ingest(ctx context.Context, cluster string, b *hubv1.Batch) (hubv1.BatchResult, error) {
	res := hubv1.BatchResult{Actions: make([]hubv1.ActionResult, 0, len(b.Actions))}
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		now := s.now().UnixNano()
		r, err := tx.ExecContext(ctx, s.q(`UPDATE clusters SET last_contact = ?, leader_identity = ?, agents_connected = ?, undelivered = ?, lag_seconds = ? WHERE name = ? AND removed_at IS NULL`),
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
		rows := make([]row, len(b.Actions))
		for i := range b.Actions {
			a := &b.Actions[i]
			dig, err := digest(a)
			if err != nil {
				return err
			}
			bb, err := json.Marshal(body{Message: a.Message, Resources: a.Resources, Containers: a.Containers, Figures: a.Figures, Refusals: a.Refusals})
			if err != nil {
				return fmt.Errorf("encode actions[%d]: %w", i, err)
			}
			rows[i] = row{a: a, digest: dig, body: string(bb), wid: WorkloadID(cluster, a.Namespace, a.Workload.Kind, a.Workload.Name)}
		}
		inserted, err := s.insertActions(ctx, tx, cluster, now, rows)
		if err != nil {
			return err
		}
		var missing []string
		for _, r := range rows {
			if _, ok := inserted[r.a.Key]; !ok {
				missing = append(missing, r.a.Key)
			}
		}
		stored, err := s.storedDigests(ctx, tx, cluster, missing)
		if err != nil {
			return err
		}
		counts := map[countKey]int64{}
		latest := map[string]newest{}
		for i, r := range rows {
			a := r.a
			id, ok := inserted[a.Key]
			if !ok || stored[a.Key] != "" {
				// Stored before, or earlier in this batch.
				if d, ok := stored[a.Key]; ok && d != r.digest {
					return &KeyConflictError{Index: i, Key: a.Key}
				}
				res.Duplicates++
				res.Actions = append(res.Actions, hubv1.ActionResult{Key: a.Key, Status: hubv1.StatusDuplicate})
				continue
			}
			stored[a.Key] = r.digest
			res.Stored++
			res.Actions = append(res.Actions, hubv1.ActionResult{Key: a.Key, Status: hubv1.StatusStored})
			if len(a.Resources) == 0 {
				counts[countKey{string(a.Type), CountedReason(a.Reason), ""}]++
			}
			for _, rn := range a.Resources {
				counts[countKey{string(a.Type), CountedReason(a.Reason), string(rn)}]++
			}
			t := a.Time.UnixNano()
			if n, ok := latest[r.wid]; !ok || t > n.time || (t == n.time && a.Seq > n.seq) {
				latest[r.wid] = newest{id: id, time: t, seq: a.Seq, a: a}
			}
		}
		// Rows are upserted in key order, so that two transactions on
		// PostgreSQL lock them in the same order and cannot deadlock.
		keys := slices.SortedFunc(maps.Keys(counts), func(x, y countKey) int {
			return cmp.Or(cmp.Compare(x.typ, y.typ), cmp.Compare(x.reason, y.reason), cmp.Compare(x.resource, y.resource))
		})
		for chunk := range slices.Chunk(keys, insertChunk) {
			args := make([]any, 0, 5*len(chunk))
			for _, k := range chunk {
				args = append(args, cluster, k.typ, k.reason, k.resource, counts[k])
			}
			if _, err := tx.ExecContext(ctx, s.q(`INSERT INTO action_counts (cluster, type, reason, resource, count) VALUES (?, ?, ?, ?, ?)`+
				strings.Repeat(", (?, ?, ?, ?, ?)", len(chunk)-1)+`
				ON CONFLICT (cluster, type, reason, resource) DO UPDATE SET count = action_counts.count + excluded.count`), args...); err != nil {
				return fmt.Errorf("count actions: %w", err)
			}
		}
		for chunk := range slices.Chunk(slices.Sorted(maps.Keys(latest)), insertChunk) {
			args := make([]any, 0, 9*len(chunk))
			for _, wid := range chunk {
				n := latest[wid]
				args = append(args, wid, cluster, n.a.Namespace, string(n.a.Workload.Kind), n.a.Workload.Name, string(n.a.Phase), n.id, n.time, n.seq)
			}
			if _, err := tx.ExecContext(ctx, s.q(`INSERT INTO workloads (id, cluster, namespace, kind, name, phase, last_action, last_time, last_seq)
				VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`+strings.Repeat(", (?, ?, ?, ?, ?, ?, ?, ?, ?)", len(chunk)-1)+`
				ON CONFLICT (id) DO UPDATE SET phase = excluded.phase, last_action = excluded.last_action,
					last_time = excluded.last_time, last_seq = excluded.last_seq
				WHERE excluded.last_time > workloads.last_time
					OR (excluded.last_time = workloads.last_time AND excluded.last_seq > workloads.last_seq)`), args...); err != nil {
				return fmt.Errorf("update workloads: %w", err)
			}
		}
		return nil
	})
	if err != nil {
		return hubv1.BatchResult{}, fmt.Errorf("store batch of cluster %q: %w", cluster, err)
	}
	return res, nil
}
