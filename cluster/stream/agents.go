package stream

import (
	"slices"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// incarnation is one run of a node's agent (Hello.started_at_unix_ns): the
// highest OOM seq the leader counted from it, across its streams, so an
// event resent after a reconnect (its ack was lost) counts once.
type incarnation struct {
	startedAt int64

	mu      sync.Mutex
	counted uint64
}

// count reports whether seq is new for the incarnation, and records it.
func (a *incarnation) count(seq uint64) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if seq <= a.counted {
		return false
	}
	a.counted = seq
	return true
}

// instanceKey names a container instance (signals.Kernel's series).
type instanceKey struct {
	pod     types.UID
	name    string
	started int64
}

// nodeState is what the leader holds per node: the agent incarnation it
// heard from last and the container instances the node's agent listed.
type nodeState struct {
	agent      *incarnation
	containers map[instanceKey]struct{}
}

// incarnation returns the node's agent incarnation that started at
// startedAt, replacing an older one; nil when startedAt is zero (an agent
// that does not say: its OOM events are deduplicated per stream only).
func (s *Server) incarnation(node string, startedAt int64) *incarnation {
	if startedAt == 0 {
		return nil
	}
	s.nodesMu.Lock()
	defer s.nodesMu.Unlock()
	n := s.node(node)
	if n.agent == nil || n.agent.startedAt != startedAt {
		if n.agent != nil {
			s.log.Info("agent restarted", "node", node,
				"previousStart", time.Unix(0, n.agent.startedAt), "start", time.Unix(0, startedAt))
		}
		n.agent = &incarnation{startedAt: startedAt}
	}
	return n.agent
}

// node returns the node's state, creating it; s.nodesMu is held.
func (s *Server) node(name string) *nodeState {
	n := s.nodes[name]
	if n == nil {
		n = &nodeState{containers: map[instanceKey]struct{}{}}
		s.nodes[name] = n
	}
	return n
}

// nodeContainers follows the container instances of a node: a snapshot
// replaces the set with what it lists, and the instances it no longer
// lists, like those the agent said are gone, are marked gone in the
// signals.Kernel, which drops them once no window reads them. A snapshot
// split over several messages marks the later messages' instances gone
// until their samples, right behind, bring them back.
func (s *Server) nodeContainers(node string, snapshot bool, listed, gone []instanceKey) {
	s.nodesMu.Lock()
	n := s.node(node)
	if snapshot {
		for _, k := range listed {
			delete(n.containers, k)
		}
		for k := range n.containers {
			gone = append(gone, k)
		}
		clear(n.containers)
	}
	for _, k := range gone {
		delete(n.containers, k)
	}
	for _, k := range listed {
		n.containers[k] = struct{}{}
	}
	// An instance listed again (in this message) is not gone: with an
	// unknown start, a restarted container's old and new index share a
	// key.
	gone = slices.DeleteFunc(gone, func(k instanceKey) bool {
		_, ok := n.containers[k]
		return ok
	})
	s.nodesMu.Unlock()
	for _, k := range gone {
		var started time.Time
		if k.started != zeroStart {
			started = time.Unix(0, k.started)
		}
		s.cfg.Kernel.Gone(k.pod, k.name, started)
		if s.cfg.Usage != nil {
			s.cfg.Usage.Gone(k.pod, k.name)
		}
	}
}

// zeroStart is the UnixNano of the zero time.Time: an unknown start.
var zeroStart = time.Time{}.UnixNano()
