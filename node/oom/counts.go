package oom

import "sync"

// Counts keeps each container cgroup's OOM kill count, reconciled between
// the kills a source delivered and the cgroup file's counter, so that
// neither a dropped event (ring buffer full, rate-limited kernel log) nor a
// cgroup removed before its file was read loses a kill. The file's counter
// is the kernel's, cumulative since the cgroup was created, so the count is
// absolute: an agent that restarted counts the kills made while it was
// down (the agent reconciles every tracked container's counter each usage
// interval, node.Agent). It is safe for concurrent use.
type Counts struct {
	mu sync.Mutex
	m  map[string]*count
}

type count struct {
	// events counts the kills delivered by the source.
	events uint64
	// file is the newest reading of the cgroup's counter; base and
	// eventsAtBase pair the first reading with the events seen by then.
	file, base, eventsAtBase uint64
	read                     bool
}

// NewCounts returns empty counts.
func NewCounts() *Counts { return &Counts{m: map[string]*count{}} }

func (c *Counts) get(cgroup string) *count {
	n := c.m[cgroup]
	if n == nil {
		n = &count{}
		c.m[cgroup] = n
	}
	return n
}

// Observe records a kill delivered by a source.
func (c *Counts) Observe(k Kill) {
	if k.Cgroup == "" {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.get(k.Cgroup).events += max(k.Count, 1)
}

// Reconcile records a reading of the cgroup's kill counter (memory.events
// or memory.oom_control) and returns the reconciled count.
func (c *Counts) Reconcile(cgroup string, file uint64) uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.get(cgroup)
	if !n.read {
		n.read, n.base, n.eventsAtBase = true, file, n.events
	}
	n.file = max(n.file, file)
	return n.total()
}

// Count returns the cgroup's reconciled kill count: the larger of the file's
// counter and its first reading plus the kills delivered since.
func (c *Counts) Count(cgroup string) uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if n, ok := c.m[cgroup]; ok {
		return n.total()
	}
	return 0
}

// Retain keeps the cgroups for which keep is true and forgets the others
// (containers no longer tracked, or cgroups that were never a tracked
// container's), so the counts stay bounded by what the agent tracks.
func (c *Counts) Retain(keep func(cgroup string) bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for p := range c.m {
		if !keep(p) {
			delete(c.m, p)
		}
	}
}

// Forget drops a cgroup that is gone and whose count was passed on.
func (c *Counts) Forget(cgroup string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.m, cgroup)
}

func (n *count) total() uint64 {
	if !n.read {
		return n.events
	}
	return max(n.file, n.base+n.events-n.eventsAtBase)
}
