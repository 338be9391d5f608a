package audit

import (
	"container/heap"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	auditv1 "github.com/kerf-dev/kerf/api/audit/v1"
	"github.com/kerf-dev/kerf/api/v1alpha1"
)

// position places an action in the API's order. That is time, newest
// first; then namespace and recommendation name; then, among one
// recommendation's actions of the same time, the later-recorded first.
//
// Seq counts the actions of the same recommendation and the same time that
// were recorded after this one, rather than giving its index in
// status.history. The leader trims the oldest entries once there are 100,
// which shifts every index but leaves Seq alone. So a cursor taken before
// a trim still points at the same action after it.
type position struct {
	Time      time.Time
	Namespace string
	Name      string
	Seq       int
}

// compare orders a before b (negative) when a comes first in the API's
// order, that is, when a is newer.
func (a position) compare(b position) int {
	if c := b.Time.Compare(a.Time); c != 0 {
		return c
	}
	if c := strings.Compare(a.Namespace, b.Namespace); c != 0 {
		return c
	}
	if c := strings.Compare(a.Name, b.Name); c != 0 {
		return c
	}
	return a.Seq - b.Seq
}

// cursorVersion is the version of the continue token's layout.
const cursorVersion = 1

// cursor is the continue token before base64: the last entry of a page.
type cursor struct {
	V         int    `json:"v"`
	Time      string `json:"t"`
	Namespace string `json:"ns"`
	Name      string `json:"n"`
	Seq       int    `json:"s"`
}

// encode returns the opaque continue token that resumes after p.
func (p position) encode() string {
	b, _ := json.Marshal(cursor{V: cursorVersion, Time: p.Time.UTC().Format(time.RFC3339Nano), Namespace: p.Namespace, Name: p.Name, Seq: p.Seq})
	return base64.RawURLEncoding.EncodeToString(b)
}

// decodePosition reads a continue token made by encode, and only one: a
// token that decodes re-encodes to itself.
func decodePosition(s string) (position, error) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return position{}, errors.New("not base64url")
	}
	var c cursor
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return position{}, errors.New("not a cursor")
	}
	if c.V != cursorVersion {
		return position{}, fmt.Errorf("version %d, want %d", c.V, cursorVersion)
	}
	t, err := time.Parse(time.RFC3339Nano, c.Time)
	if err != nil || c.Namespace == "" || c.Name == "" || c.Seq < 0 {
		return position{}, errors.New("incomplete cursor")
	}
	p := position{Time: t, Namespace: c.Namespace, Name: c.Name, Seq: c.Seq}
	// Only the API's own spelling: encoding/json also takes keys in any
	// case and ignores what follows the object, and a time may carry any
	// zone; a cursor is opaque, so every other spelling is refused.
	if p.encode() != s {
		return position{}, errors.New("not in the form this API gives")
	}
	return p, nil
}

// ref is one action of one recommendation, placed in the order; the page's
// entries are built from refs only once the page is cut.
type ref struct {
	rsr *v1alpha1.RightsizingRecommendation
	i   int // index in status.history
	pos position
}

// appendRefs appends the actions of rsr that keep accepts (nil: all).
func appendRefs(refs []ref, rsr *v1alpha1.RightsizingRecommendation, keep func(*v1alpha1.Action, position) bool) []ref {
	eachRef(rsr, keep, func(r ref) { refs = append(refs, r) }, nil)
	return refs
}

// instant is an action's time, to count the actions of one time.
type instant struct {
	sec  int64
	nsec int
}

// eachRef calls add with each action of rsr that keep accepts (nil: all).
// seen, when not nil, is cleared and used to count the actions of each
// time (a caller walking many recommendations reuses one); nil makes one.
func eachRef(rsr *v1alpha1.RightsizingRecommendation, keep func(*v1alpha1.Action, position) bool, add func(ref), seen map[instant]int) {
	h := rsr.Status.History
	if seen == nil {
		seen = make(map[instant]int, len(h))
	}
	clear(seen)
	for i := len(h) - 1; i >= 0; i-- {
		a := &h[i]
		at := instant{a.Time.Unix(), a.Time.Nanosecond()}
		p := position{Time: a.Time.Time, Namespace: rsr.Namespace, Name: rsr.Name, Seq: seen[at]}
		seen[at]++
		if keep == nil || keep(a, p) {
			add(ref{rsr: rsr, i: i, pos: p})
		}
	}
}

// firstRefs keeps the n refs that come first in the API's order, of all
// it is given. It holds them in a heap whose root is the last of them. So
// a page of n holds n+1 refs however many actions match, and costs
// n log n, not a sort of all. The history keeps up to 100 actions a
// recommendation, so in a large cluster it runs to millions.
type firstRefs struct {
	n    int
	refs []ref
}

func (f *firstRefs) Len() int           { return len(f.refs) }
func (f *firstRefs) Less(i, j int) bool { return f.refs[i].pos.compare(f.refs[j].pos) > 0 }
func (f *firstRefs) Swap(i, j int)      { f.refs[i], f.refs[j] = f.refs[j], f.refs[i] }
func (f *firstRefs) Push(x any)         { f.refs = append(f.refs, x.(ref)) }
func (f *firstRefs) Pop() any {
	last := f.refs[len(f.refs)-1]
	f.refs = f.refs[:len(f.refs)-1]
	return last
}

// add keeps r when it is among the first n so far.
func (f *firstRefs) add(r ref) {
	switch {
	case len(f.refs) < f.n:
		heap.Push(f, r)
	case f.n > 0 && r.pos.compare(f.refs[0].pos) < 0:
		f.refs[0] = r
		heap.Fix(f, 0)
	}
}

// sorted returns the refs kept, in the API's order.
func (f *firstRefs) sorted() []ref {
	sortRefs(f.refs)
	return f.refs
}

// sortRefs puts refs in the API's order.
func sortRefs(refs []ref) {
	slices.SortFunc(refs, func(a, b ref) int { return a.pos.compare(b.pos) })
}

// entry builds the API's view of the action.
func (r ref) entry() auditv1.Entry { return auditv1.EntryOf(r.rsr, &r.rsr.Status.History[r.i]) }
