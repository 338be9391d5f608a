package signals

import (
	"slices"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/kerf-dev/kerf/cluster/healthwatch"
)

// SignalContainerEvent is a container restart or termination a node agent
// saw in the kubelet's Pods API before the apiserver had it.
const SignalContainerEvent SignalKind = SignalCounters + 1

// ContainerEvent is a container status change a node agent saw in the
// kubelet's Pods API (docs/design.md sections 3 and 5). It carries the
// restart count and, when it ended a run, how.
type ContainerEvent struct {
	// PodUID is the pod's UID.
	PodUID types.UID
	// Container is the container's name in the pod spec.
	Container string
	// RestartCount is the container's restartCount after the change.
	RestartCount int32
	// Terminated is the termination first seen with the event; nil when
	// only the restart count changed.
	Terminated *healthwatch.Termination
	// At is when the agent saw the change.
	At time.Time
}

// Bounds of AgentStatuses.
const (
	// MaxAgentTerminations is how many terminations AgentStatuses keeps
	// per container, the newest; a watch's thresholds are far lower.
	MaxAgentTerminations = 16
	// DefaultAgentStatusRetention is how long AgentStatuses keeps a
	// container no event came for, by event time. By then pod status has
	// long caught up with anything the agent saw.
	DefaultAgentStatusRetention = 24 * time.Hour
)

// AgentStatuses keeps the container events of the agents' stream as an
// AgentStatusSource. It is safe for concurrent use.
//
// It tells subscribers which pod an event that changed something is
// about, so the leader evaluates its watch at once. Applying an event
// again changes nothing and signals nothing; an agent resends what a lost
// ack did not confirm.
type AgentStatuses struct {
	retention time.Duration

	mu   sync.Mutex
	pods map[types.UID]map[string]*agentContainer
	subs map[int]func(Signal)
	next int
	// newest is the newest event time seen: the clock of the retention.
	newest    time.Time
	lastSweep time.Time
}

type agentContainer struct {
	status healthwatch.AgentStatus
	last   time.Time
}

// NewAgentStatuses returns an empty store that forgets a container no
// event came for in retention (DefaultAgentStatusRetention when 0).
func NewAgentStatuses(retention time.Duration) *AgentStatuses {
	if retention <= 0 {
		retention = DefaultAgentStatusRetention
	}
	return &AgentStatuses{retention: retention, pods: map[types.UID]map[string]*agentContainer{}, subs: map[int]func(Signal){}}
}

// Subscribe calls fn, in the adding goroutine, for every event that changed
// what the store holds; fn must be quick and must not block. The returned
// func unsubscribes.
func (s *AgentStatuses) Subscribe(fn func(Signal)) (cancel func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	id := s.next
	s.next++
	s.subs[id] = fn
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		delete(s.subs, id)
	}
}

// Add applies an event: the container's restart count becomes the higher
// of the two, and a termination of a run not held yet is added. It returns
// whether anything changed, and then signals the pod.
func (s *AgentStatuses) Add(ev ContainerEvent) bool {
	s.mu.Lock()
	if ev.At.After(s.newest) {
		s.newest = ev.At
	}
	p := s.pods[ev.PodUID]
	if p == nil {
		p = map[string]*agentContainer{}
		s.pods[ev.PodUID] = p
	}
	c := p[ev.Container]
	if c == nil {
		c = &agentContainer{}
		p[ev.Container] = c
	}
	if ev.At.After(c.last) {
		c.last = ev.At
	}
	changed := false
	if ev.RestartCount > c.status.RestartCount {
		c.status.RestartCount, changed = ev.RestartCount, true
	}
	if t := ev.Terminated; t != nil && !slices.ContainsFunc(c.status.Terminations, func(x healthwatch.Termination) bool { return x.SameRun(t) }) {
		i, _ := slices.BinarySearchFunc(c.status.Terminations, t.FinishedAt, func(x healthwatch.Termination, at time.Time) int {
			return x.FinishedAt.Compare(at)
		})
		c.status.Terminations = slices.Insert(c.status.Terminations, i, *t)
		if over := len(c.status.Terminations) - MaxAgentTerminations; over > 0 {
			c.status.Terminations = slices.Delete(c.status.Terminations, 0, over)
		}
		changed = true
	}
	s.sweep()
	var subs []func(Signal)
	if changed {
		for _, fn := range s.subs {
			subs = append(subs, fn)
		}
	}
	s.mu.Unlock()
	for _, fn := range subs {
		fn(Signal{PodUID: ev.PodUID, Kind: SignalContainerEvent})
	}
	return changed
}

// sweep forgets, at most once a minute of event time, the containers no
// event came for within the retention; s.mu is held.
func (s *AgentStatuses) sweep() {
	if s.newest.Sub(s.lastSweep) < time.Minute {
		return
	}
	s.lastSweep = s.newest
	cut := s.newest.Add(-s.retention)
	for uid, p := range s.pods {
		for name, c := range p {
			if c.last.Before(cut) {
				delete(p, name)
			}
		}
		if len(p) == 0 {
			delete(s.pods, uid)
		}
	}
}

// AgentStatus implements AgentStatusSource; the terminations are a copy.
func (s *AgentStatuses) AgentStatus(podUID types.UID, container string) (healthwatch.AgentStatus, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.pods[podUID][container]
	if c == nil {
		return healthwatch.AgentStatus{}, false
	}
	return healthwatch.AgentStatus{RestartCount: c.status.RestartCount, Terminations: slices.Clone(c.status.Terminations)}, true
}

// ForgetPod drops everything held for a pod.
func (s *AgentStatuses) ForgetPod(podUID types.UID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.pods, podUID)
}

// Len returns how many containers are held.
func (s *AgentStatuses) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, p := range s.pods {
		n += len(p)
	}
	return n
}
