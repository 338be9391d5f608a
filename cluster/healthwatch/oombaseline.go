package healthwatch

import (
	"cmp"
	"math"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kerf-dev/kerf/api/v1alpha1"
)

// oomInstance names one container instance for its OOM baseline: the
// pod, the container and the instance's start in Unix seconds. Status
// times are whole seconds. An unknown start is math.MinInt64.
type oomInstance struct {
	podUID    types.UID
	container string
	started   int64
}

func oomInstanceOf(uid types.UID, container string, started time.Time) oomInstance {
	s := int64(math.MinInt64)
	if !started.IsZero() {
		s = started.Unix()
	}
	return oomInstance{uid, container, s}
}

// oomBaselines are the kernel OOM kill counts at T0 of the instances that
// ran then: the recorded ones (status.change.oomBaselines) and those a
// verdict adds.
type oomBaselines struct {
	recorded []v1alpha1.OOMBaseline
	byKey    map[oomInstance]uint64
	added    []v1alpha1.OOMBaseline
}

func newOOMBaselines(recorded []v1alpha1.OOMBaseline) *oomBaselines {
	b := &oomBaselines{recorded: recorded, byKey: make(map[oomInstance]uint64, len(recorded))}
	for _, r := range recorded {
		var started time.Time
		if r.StartedAt != nil {
			started = r.StartedAt.Time
		}
		b.byKey[oomInstanceOf(types.UID(r.PodUID), r.Container, started)] = uint64(max(r.OOMKills, 0))
	}
	return b
}

// since returns the kills in the instance since T0 by its absolute count.
// That is all of them for an instance that started at or after T0, whose
// cgroup's count started at zero after the change, or of a pod created
// after T0. Else it is the count less the instance's baseline.
//
// An instance that ran at T0 without a baseline gets one now: its count
// as read, the leader's first sight of it. It counts none yet. Kills
// before that sight are not in this count; the OOM events and pod status
// still count them.
func (b *oomBaselines) since(p *corev1.Pod, name string, in InstanceOOMKills, t0 time.Time) int {
	if p.CreationTimestamp.After(t0) || !in.Started.IsZero() && !in.Started.Before(t0) {
		return int(min(in.Kills, math.MaxInt32))
	}
	k := oomInstanceOf(p.UID, name, in.Started)
	if base, ok := b.byKey[k]; ok {
		return int(min(in.Kills-min(base, in.Kills), math.MaxInt32))
	}
	b.byKey[k] = in.Kills
	r := v1alpha1.OOMBaseline{Pod: p.Name, PodUID: string(p.UID), Container: name,
		OOMKills: int64(min(in.Kills, math.MaxInt64)), At: metav1.NewTime(in.At)}
	if !in.Started.IsZero() {
		t := metav1.NewTime(in.Started)
		r.StartedAt = &t
	}
	b.added = append(b.added, r)
	return 0
}

// toRecord returns the baselines to record: the recorded ones with the
// added ones, as many as v1alpha1.MaxBaselines leaves room for. That is
// the CRD's bound of status.change.oomBaselines. It returns nil when none
// is added.
func (b *oomBaselines) toRecord() []v1alpha1.OOMBaseline {
	room := v1alpha1.MaxBaselines - len(b.recorded)
	if len(b.added) == 0 || room <= 0 {
		return nil
	}
	slices.SortFunc(b.added, func(x, y v1alpha1.OOMBaseline) int {
		return cmp.Or(cmp.Compare(x.Pod, y.Pod), cmp.Compare(x.PodUID, y.PodUID), cmp.Compare(x.Container, y.Container),
			cmp.Compare(startedUnix(x.StartedAt), startedUnix(y.StartedAt)))
	})
	return append(slices.Clone(b.recorded), b.added[:min(len(b.added), room)]...)
}

func startedUnix(t *metav1.Time) int64 {
	if t == nil {
		return math.MinInt64
	}
	return t.Unix()
}

// absoluteOOMKills sums the kills since T0 of the container's instances by
// their absolute counts; known is false when no agent read a count.
func absoluteOOMKills(src OOMCountSource, p *corev1.Pod, name string, t0 time.Time, b *oomBaselines) (n int, known bool) {
	if src == nil {
		return 0, false
	}
	for _, in := range src.OOMKillCounts(p.UID, name) {
		known = true
		n += b.since(p, name, in, t0)
	}
	return n, known
}
