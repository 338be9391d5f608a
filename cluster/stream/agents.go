package stream

import (
	"fmt"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"k8s.io/apimachinery/pkg/types"
)

// incarnation is one run of a node's agent, by Hello.started_at_unix_ns.
// It holds the highest OOM seq the leader counted from it, across its
// streams. So an event resent after a reconnect, its ack lost, counts
// once.
type incarnation struct {
	startedAt int64

	mu      sync.Mutex
	counted uint64
	// pending are counted OOM events about pods the leader's cache did
	// not hold when they came, oldest first: they reach the Kernel once
	// the pod appears (at least once), or expire.
	pending []pendingOOM
}

// pendingOOM is an OOM event waiting for its pod.
type pendingOOM struct {
	pod       types.UID
	container string
	at        time.Time
	count     int
	expires   time.Time
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

// nodeState is what the leader holds per node. It is the agent
// incarnation it heard from last, its current stream and the container
// instances the node's agent listed, at most Config.MaxContainers.
type nodeState struct {
	agent      *incarnation
	stream     *liveStream
	containers map[instanceKey]struct{}
	// released is when its last stream ended (zero while one is open).
	released time.Time
}

// releasedNodeTTL is how long a node's state outlives its last stream.
//   - An agent that reconnects within it keeps its incarnation: the OOM
//     events it counted are not counted again, its pending ones carry
//     over.
//   - After it the node is taken for gone, scaled down or replaced, and
//     its state is dropped. So the leader's state does not grow with node
//     churn.
const releasedNodeTTL = time.Hour

// sweepEvery is how often the released nodes are looked over.
const sweepEvery = time.Minute

// sweepNodes drops the state of the nodes whose last stream ended
// releasedNodeTTL ago, at most once every sweepEvery; s.nodesMu is held.
func (s *Server) sweepNodes(now time.Time) {
	if now.Sub(s.swept) < sweepEvery {
		return
	}
	s.swept = now
	for name, n := range s.nodes {
		if n.stream == nil && !n.released.IsZero() && now.Sub(n.released) >= releasedNodeTTL {
			delete(s.nodes, name)
		}
	}
	s.metrics.nodeStates.Set(float64(len(s.nodes)))
}

// incarnation returns the node's agent incarnation that started at
// startedAt, replacing an older one; its pending OOM events carry over.
// When startedAt is zero, the agent does not say, and it returns a private
// one: its OOM events are deduplicated per stream only.
func (s *Server) incarnation(node string, startedAt int64) *incarnation {
	if startedAt == 0 {
		return &incarnation{}
	}
	s.nodesMu.Lock()
	defer s.nodesMu.Unlock()
	n := s.node(node)
	if n.agent == nil || n.agent.startedAt != startedAt {
		if n.agent != nil {
			s.log.Info("agent restarted", "node", node,
				"previousStart", time.Unix(0, n.agent.startedAt), "start", time.Unix(0, startedAt))
		}
		next := &incarnation{startedAt: startedAt}
		if n.agent != nil {
			// Kills the old run reported are still kills.
			n.agent.mu.Lock()
			next.pending, n.agent.pending = n.agent.pending, nil
			n.agent.mu.Unlock()
		}
		n.agent = next
	}
	return n.agent
}

// node returns the node's state, creating it; s.nodesMu is held.
func (s *Server) node(name string) *nodeState {
	n := s.nodes[name]
	if n == nil {
		n = &nodeState{containers: map[instanceKey]struct{}{}}
		s.nodes[name] = n
		s.metrics.nodeStates.Set(float64(len(s.nodes)))
	}
	return n
}

// nodeContainers follows the container instances of a node. A node may
// list Config.MaxContainers instances at most.
//   - A snapshot replaces the set with what it lists.
//   - The instances it no longer lists, like those the agent said are
//     gone, are marked gone in the signals.Kernel. It drops them once no
//     window reads them.
//   - A snapshot split over several messages marks the later messages'
//     instances gone until their samples, right behind, bring them back.
func (s *Server) nodeContainers(node string, snapshot bool, listed, gone []instanceKey) error {
	s.nodesMu.Lock()
	n := s.node(node)
	if snapshot {
		for _, k := range listed {
			delete(n.containers, k)
		}
		for k := range n.containers {
			gone = append(gone, k)
		}
		n.containers = make(map[instanceKey]struct{}, len(listed))
	}
	for _, k := range gone {
		delete(n.containers, k)
	}
	for _, k := range listed {
		n.containers[k] = struct{}{}
	}
	var err error
	if len(n.containers) > s.cfg.MaxContainers {
		err = &malformedError{code: codes.ResourceExhausted, reason: "too_many_containers",
			msg: fmt.Sprintf("node %s lists more than %d containers (limit MaxContainers)", node, s.cfg.MaxContainers)}
	}
	// An instance listed again (in this message) is not gone: with an
	// unknown start, a restarted container's old and new index share a
	// key.
	gone = slices.DeleteFunc(gone, func(k instanceKey) bool {
		_, ok := n.containers[k]
		return ok
	})
	s.nodesMu.Unlock()
	s.markGone(gone)
	return err
}

// markGone marks container instances gone in the stores.
func (s *Server) markGone(gone []instanceKey) {
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
