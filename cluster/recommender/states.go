package recommender

import (
	"time"

	"github.com/kerf-dev/kerf/cluster/recommend"
)

// stamp is a time the loop keeps per workload or container, as Unix
// nanoseconds; zero is the zero time. It is 8 bytes where a time.Time is
// 24: a trackedInstance is 80 bytes rather than 144, one per running
// container (TestStampsKeepTheirTimes). It keeps no monotonic reading, so
// the durations between stamps are the wall clock's, as those between the
// agents' readings are.
type stamp int64

// stampOf returns t's stamp.
func stampOf(t time.Time) stamp {
	if t.IsZero() {
		return 0
	}
	return stamp(t.UnixNano())
}

// Time returns the time s stamps, in the local zone.
func (s stamp) Time() time.Time {
	if s == 0 {
		return time.Time{}
	}
	return time.Unix(0, int64(s))
}

// IsZero reports whether s stamps the zero time.
func (s stamp) IsZero() bool { return s == 0 }

// containerStates are a workload's histories, one per container and its
// (pod) entry, in the order first seen. A workload has one or a few, so
// they are a slice: one allocation of about 150 bytes each, where a map
// of pointers took three (its header, its group and the state), about
// 390 bytes for one container (TestContainerStatesHoldLessThanAMap).
type containerStates []containerState

// containerState is one container's history.
type containerState struct {
	name  string
	state recommend.ContainerState
}

// get returns the history of the container name; nil when it has none.
// The pointer is valid until the next add.
func (cs containerStates) get(name string) *recommend.ContainerState {
	for i := range cs {
		if cs[i].name == name {
			return &cs[i].state
		}
	}
	return nil
}

// add adds st as the history of the container name, which has none, and
// returns it where it is kept.
func (cs *containerStates) add(name string, st recommend.ContainerState) *recommend.ContainerState {
	*cs = append(*cs, containerState{name: name, state: st})
	return &(*cs)[len(*cs)-1].state
}

// names returns the containers' names.
func (cs containerStates) names() []string {
	out := make([]string, len(cs))
	for i := range cs {
		out[i] = cs[i].name
	}
	return out
}
