// Package savings computes what Kerf's changes saved per namespace, and
// what they cost, from what Kerf recorded on RightsizingRecommendations.
// It is pure: it reads the recommendations it is given and writes nothing.
//
// Summarize's figures are the CPU and memory requests of the manifests,
// those in force now and those recommended, and the rollbacks and OOM
// kills of a window. `kubectl kerf status --summary` prints them and the
// leader exports them as metrics (docs/monitoring.md, "Savings").
// Recorded reads one container's value in the manifest and in force, as
// `kubectl kerf status` shows it.
package savings

import (
	"slices"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/kerf-dev/kerf/api/v1alpha1"
)

// Amounts are CPU and memory requests: millicores and bytes.
type Amounts struct {
	// CPUMillis is CPU in millicores.
	CPUMillis int64 `json:"cpuMillis"`
	// MemoryBytes is memory in bytes.
	MemoryBytes int64 `json:"memoryBytes"`
}

// Minus is a − b, per resource.
func (a Amounts) Minus(b Amounts) Amounts {
	return Amounts{CPUMillis: a.CPUMillis - b.CPUMillis, MemoryBytes: a.MemoryBytes - b.MemoryBytes}
}

// Plus is a + b, per resource.
func (a Amounts) Plus(b Amounts) Amounts {
	return Amounts{CPUMillis: a.CPUMillis + b.CPUMillis, MemoryBytes: a.MemoryBytes + b.MemoryBytes}
}

// Namespace is one namespace's figures, computed by Summarize.
//
// Requests are those of one pod per workload: each recommendation counts
// once, whatever its replicas. A recommendation records no replica count,
// and figures that moved with an autoscaler would not say what Kerf did.
//
// Each container request a recommendation names is counted the same way:
//   - Manifest is the request before Kerf's first recorded change of it:
//     the old value of the oldest applied action in status.history that
//     moved it (0 when that action's old side had none), else the previous
//     value in status.change.
//   - InForce is the request after Kerf's newest change or rollback of it:
//     the new value of the newest applied or rolled_back action that moved
//     it (0 when removed), else status.change's applied value, else the
//     manifest's (Kerf never moved it).
//   - Recommended is spec.containers' request; where the spec sets none,
//     the request in force (Kerf leaves it alone).
//
// A request Kerf never moved has no recorded manifest value: it counts in
// none of the three sums, only in Unrecorded. So a recommendation not
// applied yet (Pending, Blocked) adds to Unrecorded, not to Recommended.
type Namespace struct {
	// Namespace is the namespace's name; "" on Total's row.
	Namespace string `json:"namespace"`
	// Workloads counts the namespace's recommendations.
	Workloads int `json:"workloads"`
	// Manifest, InForce and Recommended are the summed requests.
	Manifest    Amounts `json:"manifest"`
	InForce     Amounts `json:"inForce"`
	Recommended Amounts `json:"recommended"`
	// Unrecorded counts the container requests (a container's CPU or its
	// memory) left out of the sums: Kerf never moved them, so it recorded
	// no manifest value.
	Unrecorded int `json:"unrecorded"`
	// Rollbacks counts the rolled_back actions in the window.
	Rollbacks int `json:"rollbacks"`
	// OOMKills sums the OOM kills that triggered those rollbacks: each
	// action's "oomKills N ≥ T" figure (the health watch's count). Kills
	// outside a health watch are not recorded on a recommendation.
	OOMKills int `json:"oomKills"`
}

// Saved is what the changes in force save against the manifests:
// Manifest − InForce (negative where Kerf raised requests).
func (n Namespace) Saved() Amounts { return n.Manifest.Minus(n.InForce) }

// Pending is what the recommendations would still change: InForce −
// Recommended (positive where they would save more).
func (n Namespace) Pending() Amounts { return n.InForce.Minus(n.Recommended) }

// Summarize computes each namespace's figures from recs, sorted by
// namespace. Rollbacks and OOM kills count the actions whose time is in
// [from, to); the requests are those of now. It only reads recs.
func Summarize(recs []*v1alpha1.RightsizingRecommendation, from, to time.Time) []Namespace {
	byNS := map[string]*Namespace{}
	for _, r := range recs {
		if r == nil {
			continue
		}
		n := byNS[r.Namespace]
		if n == nil {
			n = &Namespace{Namespace: r.Namespace}
			byNS[r.Namespace] = n
		}
		add(n, r, from, to)
	}
	out := make([]Namespace, 0, len(byNS))
	for _, n := range byNS {
		out = append(out, *n)
	}
	slices.SortFunc(out, func(a, b Namespace) int { return strings.Compare(a.Namespace, b.Namespace) })
	return out
}

// Total sums rows into one, whose Namespace is "".
func Total(rows []Namespace) Namespace {
	var t Namespace
	for _, n := range rows {
		t.Workloads += n.Workloads
		t.Manifest = t.Manifest.Plus(n.Manifest)
		t.InForce = t.InForce.Plus(n.InForce)
		t.Recommended = t.Recommended.Plus(n.Recommended)
		t.Unrecorded += n.Unrecorded
		t.Rollbacks += n.Rollbacks
		t.OOMKills += n.OOMKills
	}
	return t
}

// add counts r in n.
func add(n *Namespace, r *v1alpha1.RightsizingRecommendation, from, to time.Time) {
	n.Workloads++
	for _, c := range r.Spec.Containers {
		for _, res := range []v1alpha1.ResourceName{v1alpha1.ResourceCPU, v1alpha1.ResourceMemory} {
			manifest, inForce, ok := Recorded(r, c.Name, Field{Resource: res})
			if !ok {
				n.Unrecorded++
				continue
			}
			recommended := inForce
			if v, set := value(c.Requests, res); set {
				recommended = v
			}
			addTo(&n.Manifest, res, manifest)
			addTo(&n.InForce, res, inForce)
			addTo(&n.Recommended, res, recommended)
		}
	}
	for i := range r.Status.History {
		a := &r.Status.History[i]
		if a.Type != v1alpha1.ActionRolledBack || a.Time.Time.Before(from) || !a.Time.Time.Before(to) {
			continue
		}
		n.Rollbacks++
		n.OOMKills += oomKills(a.Figures)
	}
}

// Field is one of a container's four values: the request or the limit
// of CPU or memory.
type Field struct {
	// Limit says the field is a limit, else a request.
	Limit bool
	// Resource is cpu or memory.
	Resource v1alpha1.ResourceName
}

// Fields are the four fields: requests before limits, CPU before memory.
var Fields = [...]Field{
	{Resource: v1alpha1.ResourceCPU}, {Resource: v1alpha1.ResourceMemory},
	{Limit: true, Resource: v1alpha1.ResourceCPU}, {Limit: true, Resource: v1alpha1.ResourceMemory},
}

// get is f's value in r, in millicores or bytes; set is false when r has
// none.
func (f Field) get(r v1alpha1.Resources) (v int64, set bool) {
	if f.Limit {
		return value(r.Limits, f.Resource)
	}
	return value(r.Requests, f.Resource)
}

// Recorded is field f of container in the manifest and in force, as r
// records them. They are millicores or bytes, 0 where unset. ok is false
// when Kerf never moved the field. Namespace's doc says how each is read.
func Recorded(r *v1alpha1.RightsizingRecommendation, container string, f Field) (manifest, inForce int64, ok bool) {
	st := &r.Status
	manifestSet, inForceSet := false, false
	for i := range st.History {
		a := &st.History[i]
		if a.Type != v1alpha1.ActionApplied {
			continue
		}
		if before, _, moved := movedBy(a, container, f); moved {
			manifest, manifestSet = before, true
			break
		}
	}
	for i := len(st.History) - 1; i >= 0; i-- {
		a := &st.History[i]
		if a.Type != v1alpha1.ActionApplied && a.Type != v1alpha1.ActionRolledBack {
			continue
		}
		if _, after, moved := movedBy(a, container, f); moved {
			inForce, inForceSet = after, true
			break
		}
	}
	if ch := st.Change; ch != nil && (!manifestSet || !inForceSet) {
		for _, cc := range ch.Containers {
			if cc.Name != container {
				continue
			}
			prev, prevSet := f.get(cc.Previous)
			applied, appliedSet := f.get(cc.Applied)
			if !prevSet && !appliedSet {
				continue
			}
			if !manifestSet {
				manifest, manifestSet = prev, true
			}
			if !inForceSet {
				inForce, inForceSet = applied, true
			}
		}
	}
	if !manifestSet {
		return 0, 0, false
	}
	if !inForceSet {
		inForce = manifest
	}
	return manifest, inForce, true
}

// movedBy is container's field f before and after action a (0 where a
// side has none); moved is false when a names neither side.
func movedBy(a *v1alpha1.Action, container string, f Field) (before, after int64, moved bool) {
	for _, cc := range a.Containers {
		if cc.Name != container {
			continue
		}
		o, oSet := f.get(cc.Old)
		n, nSet := f.get(cc.New)
		if oSet || nSet {
			return o, n, true
		}
	}
	return 0, 0, false
}

// value is res in v, in millicores or bytes.
func value(v *v1alpha1.ResourceValues, res v1alpha1.ResourceName) (int64, bool) {
	if v == nil {
		return 0, false
	}
	q := v.CPU
	if res == v1alpha1.ResourceMemory {
		q = v.Memory
	}
	if q == nil {
		return 0, false
	}
	return amount(q, res), true
}

// amount reads q without writing to it: cached recommendations share
// their quantities among readers (cluster/cachestore).
func amount(q *resource.Quantity, res v1alpha1.ResourceName) int64 {
	if res == v1alpha1.ResourceCPU {
		return q.MilliValue()
	}
	return q.Value()
}

func addTo(a *Amounts, res v1alpha1.ResourceName, v int64) {
	if res == v1alpha1.ResourceCPU {
		a.CPUMillis += v
	} else {
		a.MemoryBytes += v
	}
}

// oomKillsFigure starts the health watch's OOM kill figure,
// "oomKills 2 ≥ 1" (cluster/healthwatch).
const oomKillsFigure = "oomKills "

// oomKills is the count in figures' OOM kill figure, 0 without one.
func oomKills(figures []string) int {
	for _, f := range figures {
		rest, ok := strings.CutPrefix(f, oomKillsFigure)
		if !ok {
			continue
		}
		count, _, _ := strings.Cut(rest, " ")
		if n, err := strconv.Atoi(count); err == nil && n > 0 {
			return n
		}
	}
	return 0
}
