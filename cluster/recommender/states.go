package recommender

import "github.com/kerf-dev/kerf/cluster/recommend"

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
