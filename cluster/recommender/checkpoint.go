package recommender

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/cluster/policy"
	"github.com/kerf-dev/kerf/cluster/recommend"
	"github.com/kerf-dev/kerf/cluster/workload"
)

// Defaults of the recommender's checkpoints (Config).
const (
	// DefaultCheckpointInterval is how long a workload's checkpoint waits
	// before it is written again. VPA writes every minute. Ten minutes of
	// history is what a failover may lose, against one write per workload
	// per ten minutes.
	DefaultCheckpointInterval = 10 * time.Minute
	// DefaultCheckpointWrites bounds the checkpoint writes (and deletes)
	// of one pass: 20 every 10 s pass is 2 a second at most, 1,200 per
	// default interval.
	DefaultCheckpointWrites = 20
	// checkpointShutdownTimeout bounds the writes at shutdown, within the
	// manager's ShutdownTimeout.
	checkpointShutdownTimeout = 3 * time.Second
	// checkpointPage is the page size of the checkpoint lists: at most 50
	// objects of at most about 360 KiB each are held at once.
	checkpointPage = 50
)

// checkpointMetrics are the recommender's checkpoint counters.
type checkpointMetrics struct {
	written, deleted, loaded prometheus.Counter
	refused                  *prometheus.CounterVec
}

// Reasons a container's checkpoint is refused (refused's label).
const (
	refusedNewer       = "newer"
	refusedFingerprint = "fingerprint"
	refusedCorrupt     = "corrupt"
)

// newCheckpointMetrics registers the checkpoint counters on reg.
func newCheckpointMetrics(reg prometheus.Registerer) (*checkpointMetrics, error) {
	m := &checkpointMetrics{
		written: prometheus.NewCounter(prometheus.CounterOpts{Name: "kerf_recommender_checkpoints_written_total",
			Help: "RightsizingCheckpoints the recommender wrote."}),
		deleted: prometheus.NewCounter(prometheus.CounterOpts{Name: "kerf_recommender_checkpoints_deleted_total",
			Help: "RightsizingCheckpoints the recommender deleted: their workload is gone or no longer recommended for."}),
		loaded: prometheus.NewCounter(prometheus.CounterOpts{Name: "kerf_recommender_checkpoint_containers_loaded_total",
			Help: "Container histories the recommender resumed from its checkpoints."}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kerf_recommender_checkpoint_containers_refused_total",
			Help: "Container checkpoints the recommender could not load and ignored, by reason (newer, fingerprint, corrupt)."}, []string{"reason"}),
	}
	for _, c := range []prometheus.Collector{m.written, m.deleted, m.loaded, m.refused} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register the recommender's checkpoint metrics: %w", err)
		}
	}
	for _, r := range []string{refusedNewer, refusedFingerprint, refusedCorrupt} {
		m.refused.WithLabelValues(r)
	}
	return m, nil
}

// Fingerprint is the model's fingerprint as a checkpoint records it.
func Fingerprint(m *recommend.Model) string { return fmt.Sprintf("%08x", m.Fingerprint()) }

// checkpointMark is what the loop keeps of a workload's checkpoint.
type checkpointMark struct {
	// at is when it was last written, or found unchanged; zero for never.
	at stamp
	// hash is the FNV-1a of what was last written or loaded; zero when
	// the object may hold something else (nothing written yet, or a
	// container refused at load), so the next due write happens.
	hash uint64
	// ownerUID is the workload's UID, its checkpoint's owner; empty until
	// the workload was read. The rest of the owner reference is the
	// workload's Ref: a whole metav1.OwnerReference was 80 bytes a
	// workload.
	ownerUID types.UID
}

// listCheckpoints calls fn for every checkpoint the recommender wrote in
// the namespaces it watches, a page at a time. It reads the apiserver,
// not a cache: the checkpoints are read at start and at collection only,
// and a cache would hold them all on every replica.
func (r *Loop) listCheckpoints(ctx context.Context, fn func(*v1alpha1.RightsizingCheckpoint)) error {
	namespaces := r.namespaces
	if len(namespaces) == 0 {
		namespaces = []string{""}
	}
	for _, ns := range namespaces {
		cont := ""
		for {
			var l v1alpha1.RightsizingCheckpointList
			opts := []client.ListOption{client.MatchingLabels{v1alpha1.RecommendedByLabel: v1alpha1.RecommendedByKerf},
				client.Limit(checkpointPage), client.Continue(cont)}
			if ns != "" {
				opts = append(opts, client.InNamespace(ns))
			}
			if err := r.reader.List(ctx, &l, opts...); err != nil {
				return fmt.Errorf("list RightsizingCheckpoints: %w", err)
			}
			for i := range l.Items {
				fn(&l.Items[i])
			}
			if cont = l.Continue; cont == "" {
				break
			}
		}
	}
	return nil
}

// loadCheckpoints resumes the histories the checkpoints hold, before the
// first pass of a new leader. A state already in memory wins; a
// container's checkpoint that cannot be loaded is logged with why, counted
// and ignored.
func (r *Loop) loadCheckpoints(ctx context.Context) error {
	pols, err := policy.Gatherer{Reader: r.client}.All(ctx)
	if err != nil {
		return err
	}
	n := 0
	err = r.listCheckpoints(ctx, func(ck *v1alpha1.RightsizingCheckpoint) {
		n += r.loadCheckpoint(ck, r.checkpointModel(ctx, pols, ck))
	})
	if err != nil {
		return err
	}
	r.log.Info("recommender resumed from its checkpoints", "containers", n)
	return nil
}

// checkpointModel is the model a checkpoint's workload's states are under:
// the one it has in memory, else its policy's, else the defaults'.
func (r *Loop) checkpointModel(ctx context.Context, pols *policy.Policies, ck *v1alpha1.RightsizingCheckpoint) *recommend.Model {
	ref := workload.Ref{Kind: ck.Spec.TargetRef.Kind, Namespace: ck.Namespace, Name: ck.Spec.TargetRef.Name}
	if tw := r.workloads[ref]; tw != nil && tw.model != nil {
		return tw.model
	}
	if rw := r.resolve(ctx, pols, ref); rw != nil {
		if m, _, err := r.model(rw.resolved.Spec); err == nil {
			return m
		}
	}
	return r.base
}

// loadCheckpoint loads one checkpoint's containers under the model m and
// returns how many; a container checkpointed under another model is
// refused by its fingerprint.
func (r *Loop) loadCheckpoint(ck *v1alpha1.RightsizingCheckpoint, m *recommend.Model) int {
	ref := workload.Ref{Kind: ck.Spec.TargetRef.Kind, Namespace: ck.Namespace, Name: ck.Spec.TargetRef.Name}
	tw := r.workloads[ref]
	if tw == nil {
		tw = &trackedWorkload{model: m}
	}
	m = tw.model
	fp := Fingerprint(m)
	loaded, refused := 0, false
	for _, c := range ck.Status.Containers {
		if tw.containers.get(c.Name) != nil {
			continue // fed in memory already: it is newer
		}
		if r.tracked >= r.max {
			r.log.Warn("recommender tracks its maximum of containers; checkpoint not loaded", "namespace", ck.Namespace, "checkpoint", ck.Name, "container", c.Name, "maxContainers", r.max)
			continue
		}
		reason, err := "", error(nil)
		var st recommend.ContainerState
		if c.Fingerprint != fp {
			reason, err = refusedFingerprint, fmt.Errorf("made with other model parameters (fingerprint %s, this recommender %s)", c.Fingerprint, fp)
		} else if st, err = recommend.LoadCheckpoint(m, c.Data); errors.Is(err, recommend.ErrCheckpointNewer) {
			reason = refusedNewer
		} else if err != nil {
			reason = refusedCorrupt
		}
		if err != nil {
			r.log.Warn("checkpoint refused and ignored", "namespace", ck.Namespace, "checkpoint", ck.Name, "container", c.Name, "reason", reason, "err", err)
			r.ckptMetrics.refused.WithLabelValues(reason).Inc()
			refused = true
			continue
		}
		tw.containers.add(c.Name, st)
		r.tracked++
		loaded++
	}
	if len(tw.containers) == 0 {
		return 0
	}
	r.workloads[ref] = tw
	r.ckptMetrics.loaded.Add(float64(loaded))
	if ck.Status.WrittenAt != nil {
		tw.ckpt.at = stampOf(ck.Status.WrittenAt.Time)
	}
	if !refused {
		tw.ckpt.hash, _ = r.encodeCheckpoint(tw, nil)
	}
	return loaded
}

// encodeCheckpoint returns the hash of the workload's states. When into is
// not nil, it fills into's containers with them, sorted by name. It keeps
// at most MaxCheckpointContainers, as the pod spec bounds a workload's
// containers; the rest are skipped with a warning.
func (r *Loop) encodeCheckpoint(tw *trackedWorkload, into *v1alpha1.RightsizingCheckpointStatus) (uint64, []string) {
	names := tw.containers.names()
	slices.Sort(names)
	var skipped []string
	if len(names) > v1alpha1.MaxCheckpointContainers {
		names, skipped = names[:v1alpha1.MaxCheckpointContainers], names[v1alpha1.MaxCheckpointContainers:]
	}
	h := fnv.New64a()
	for _, name := range names {
		r.ckptBuf = tw.containers.get(name).AppendCheckpoint(tw.model, r.ckptBuf[:0])
		if len(r.ckptBuf) > v1alpha1.MaxContainerCheckpointBytes {
			skipped = append(skipped, name)
			continue
		}
		_, _ = h.Write([]byte(name))
		_, _ = h.Write([]byte{0})
		_, _ = h.Write(r.ckptBuf)
		if into != nil {
			into.Containers = append(into.Containers, v1alpha1.ContainerCheckpoint{
				Name: name, Version: recommend.CheckpointVersion, Data: slices.Clone(r.ckptBuf)})
		}
	}
	return h.Sum64() | 1, skipped // never zero: zero means "write"
}

// checkpoint writes the checkpoints due in this pass, the oldest first,
// at most CheckpointWrites writes and deletes per pass.
//   - Due are those of the workloads seen in it, their owner read, whose
//     last write is at least CheckpointInterval old and whose states
//     changed since.
//   - It then deletes the checkpoints of the workloads forgotten.
//   - Every interval it collects the checkpoints of workloads that are
//     gone or no longer recommended for.
func (r *Loop) checkpoint(ctx context.Context, pols *policy.Policies, resolved map[workload.Ref]*resolvedWorkload, now time.Time) {
	budget := r.ckptWrites
	budget -= r.dropCheckpoints(ctx, budget)
	due := r.ckptDue[:0]
	for ref, tw := range r.workloads {
		rw := resolved[ref]
		if rw == nil || tw.seen != r.tick {
			continue
		}
		tw.ckpt.ownerUID = rw.uid
		if tw.ckpt.at.IsZero() || now.Sub(tw.ckpt.at.Time()) >= r.ckptInterval {
			due = append(due, ref)
		}
	}
	r.ckptDue = due
	budget -= r.writeCheckpoints(ctx, due, budget, now)
	if budget > 0 && (r.ckptCollected.IsZero() || now.Sub(r.ckptCollected) >= r.ckptInterval) {
		if err := r.collectCheckpoints(ctx, pols, budget); err != nil {
			r.log.Warn("checkpoints not collected", "err", err)
			return
		}
		r.ckptCollected = now
	}
}

// oldestCheckpointFirst orders workloads by their checkpoint's last
// write, then by namespace, kind and name. It compares field by field: a
// key built of them was two strings a comparison, 5 % of all the leader
// allocated at 25,000 workloads.
func (r *Loop) oldestCheckpointFirst(a, b workload.Ref) int {
	return cmp.Or(cmp.Compare(r.workloads[a].ckpt.at, r.workloads[b].ckpt.at),
		cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Name, b.Name))
}

// writeCheckpoints writes the checkpoints of due, the oldest first, at
// most budget (unbounded when negative), and returns how many it tried.
// One whose states did not change since its last write is not written
// (and does not count).
func (r *Loop) writeCheckpoints(ctx context.Context, due []workload.Ref, budget int, now time.Time) int {
	slices.SortFunc(due, r.oldestCheckpointFirst)
	tried := 0
	for _, ref := range due {
		if budget >= 0 && tried >= budget || ctx.Err() != nil {
			break
		}
		tw := r.workloads[ref]
		if tw.ckpt.ownerUID == "" {
			continue
		}
		ck := &v1alpha1.RightsizingCheckpoint{
			ObjectMeta: metav1.ObjectMeta{Namespace: ref.Namespace, Name: ref.Name,
				Labels:          map[string]string{v1alpha1.RecommendedByLabel: v1alpha1.RecommendedByKerf},
				OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: string(ref.Kind), Name: ref.Name, UID: tw.ckpt.ownerUID}}},
			Spec: v1alpha1.RightsizingCheckpointSpec{TargetRef: v1alpha1.TargetRef{APIVersion: "apps/v1", Kind: ref.Kind, Name: ref.Name}},
		}
		hash, skipped := r.encodeCheckpoint(tw, &ck.Status)
		if len(skipped) > 0 {
			r.log.Warn("containers left out of the checkpoint", "namespace", ref.Namespace, "workload", ref.String(), "containers", skipped,
				"maxContainers", v1alpha1.MaxCheckpointContainers, "maxBytes", v1alpha1.MaxContainerCheckpointBytes)
		}
		if hash == tw.ckpt.hash {
			tw.ckpt.at = stampOf(now)
			continue
		}
		tried++
		at := metav1.NewTime(now.UTC().Truncate(time.Second))
		fp := Fingerprint(tw.model)
		for i := range ck.Status.Containers {
			ck.Status.Containers[i].Fingerprint, ck.Status.Containers[i].WrittenAt = fp, at
		}
		ck.Status.WrittenAt, ck.Status.ContainerCount = &at, int32(len(ck.Status.Containers))
		if err := r.putCheckpoint(ctx, ck); err != nil {
			r.log.Warn("checkpoint not written", "namespace", ref.Namespace, "workload", ref.String(), "err", err)
			continue
		}
		r.ckptMetrics.written.Inc()
		tw.ckpt.at, tw.ckpt.hash = stampOf(now), hash
	}
	return tried
}

// putCheckpoint writes ck whole, creating it when it does not exist. Its
// merge patch replaces the labels, owner, spec and status; lists are
// replaced, not merged. The last writer wins: a former leader's late
// write at shutdown is replaced by the new leader's next one.
func (r *Loop) putCheckpoint(ctx context.Context, ck *v1alpha1.RightsizingCheckpoint) error {
	body, err := json.Marshal(map[string]any{
		"metadata": map[string]any{"labels": ck.Labels, "ownerReferences": ck.OwnerReferences},
		"spec":     ck.Spec, "status": ck.Status,
	})
	if err != nil {
		return fmt.Errorf("encode checkpoint %s/%s: %w", ck.Namespace, ck.Name, err)
	}
	err = r.client.Patch(ctx, ck.DeepCopy(), client.RawPatch(types.MergePatchType, body))
	if apierrors.IsNotFound(err) {
		err = r.client.Create(ctx, ck)
	}
	if err != nil {
		return fmt.Errorf("write checkpoint %s/%s: %w", ck.Namespace, ck.Name, err)
	}
	return nil
}

// flushCheckpoints writes, at shutdown, every checkpoint whose states
// changed since its last write, within checkpointShutdownTimeout. It is
// best effort: what does not fit is lost, as a crash would lose it.
func (r *Loop) flushCheckpoints() {
	ctx, cancel := context.WithTimeout(context.Background(), checkpointShutdownTimeout)
	defer cancel()
	due := r.ckptDue[:0]
	for ref := range r.workloads {
		due = append(due, ref)
	}
	r.ckptDue = due
	if n := r.writeCheckpoints(ctx, due, -1, r.now()); n > 0 {
		r.log.Info("recommender wrote its checkpoints at shutdown", "tried", n, "err", ctx.Err())
	}
}

// dropCheckpoints deletes the checkpoints of the workloads forgotten, at
// most budget, and returns how many it tried.
func (r *Loop) dropCheckpoints(ctx context.Context, budget int) int {
	tried := 0
	for ref := range r.dropped {
		if tried >= budget {
			break
		}
		if r.workloads[ref] != nil {
			delete(r.dropped, ref) // tracked again since
			continue
		}
		tried++
		if err := r.deleteCheckpoint(ctx, ref.Namespace, ref.Name); err != nil {
			r.log.Warn("checkpoint not deleted", "namespace", ref.Namespace, "workload", ref.String(), "err", err)
			continue
		}
		delete(r.dropped, ref)
	}
	return tried
}

// deleteCheckpoint deletes one checkpoint; one already gone is fine.
func (r *Loop) deleteCheckpoint(ctx context.Context, ns, name string) error {
	err := r.client.Delete(ctx, &v1alpha1.RightsizingCheckpoint{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("delete checkpoint %s/%s: %w", ns, name, err)
	}
	r.ckptMetrics.deleted.Inc()
	return nil
}

// collectCheckpoints deletes, at most budget, the checkpoints of
// untracked workloads that are gone or whose policy no longer enables
// spec.recommend. They were forgotten while no leader ran, or by a former
// leader. The owner reference has the garbage collector delete a deleted
// workload's checkpoint too; this covers the policy and a cluster without
// one.
func (r *Loop) collectCheckpoints(ctx context.Context, pols *policy.Policies, budget int) error {
	var stale []workload.Ref
	err := r.listCheckpoints(ctx, func(ck *v1alpha1.RightsizingCheckpoint) {
		ref := workload.Ref{Kind: ck.Spec.TargetRef.Kind, Namespace: ck.Namespace, Name: ck.Spec.TargetRef.Name}
		if r.workloads[ref] != nil || len(stale) >= budget {
			return
		}
		_, err := workload.Get(ctx, r.client, ref.Namespace, v1alpha1.TargetRef{Kind: ref.Kind, Name: ref.Name})
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			return // not known now: kept
		case r.resolve(ctx, pols, ref) != nil:
			return
		}
		stale = append(stale, workload.Ref{Kind: ref.Kind, Namespace: ck.Namespace, Name: ck.Name})
	})
	if err != nil {
		return err
	}
	for _, ref := range stale {
		if err := r.deleteCheckpoint(ctx, ref.Namespace, ref.Name); err != nil {
			r.log.Warn("checkpoint not deleted", "namespace", ref.Namespace, "checkpoint", ref.Name, "err", err)
		}
	}
	return nil
}
