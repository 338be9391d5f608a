package signals

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// UsageSample is one reading of a container's usage that its node's agent
// reported, what the recommender sizes requests from (issue 13). Agents
// report every usage interval, 10 s by default.
type UsageSample struct {
	// PodUID is the pod's UID.
	PodUID types.UID
	// Container is the container's name in the pod spec.
	Container string
	// At is when the agent read it, on the leader's clock.
	At time.Time
	// CPU is the CPU time the container consumed since its cgroup was
	// created: a counter, which goes back to zero when the container
	// restarts.
	CPU time.Duration
	// WorkingSet is the container's memory working set in bytes then
	// (usage less inactive file, as cadvisor defines it).
	WorkingSet uint64
	// Peak is the highest memory usage in bytes (page cache included)
	// since the agent's previous reading of the container.
	Peak uint64
}

// Bounds of Usage.
const (
	// UsageSamples is how many readings Usage keeps per container, the
	// newest. That is 40 s at the agent's default 10 s usage interval, for
	// a reader that takes them every 30 s. Each costs 32 bytes of the
	// leader's memory per container: four are 38 MB at 300,000
	// containers.
	UsageSamples = 4
	// DefaultUsageRetention is how long Usage keeps a container no reading
	// came for, by reading time. It covers a node whose stream ended
	// without saying its containers went.
	DefaultUsageRetention = 10 * time.Minute
)

// Usage keeps the newest usage readings of every container the agents
// report, for the recommender. It is safe for concurrent use.
//
// It keeps a ring of readings per pod UID and container name. A ring is
// forgotten when the agent says the container went (Gone), or when no
// reading came for the retention. A reader that takes the readings at
// least once per ring's span misses none.
type Usage struct {
	retention time.Duration

	mu         sync.Mutex
	containers map[usageKey]*usageRing
	// newest is the newest reading time seen: the clock of the retention.
	newest    time.Time
	lastSweep time.Time
}

// usageKey names a container: one map of them costs less than a map per
// pod.
type usageKey struct {
	pod  types.UID
	name string
}

// usageRing is one container's newest readings, oldest first from start:
// one allocation per container.
type usageRing struct {
	readings [UsageSamples]usageReading
	start, n int
}

// usageReading is a UsageSample without its key, in 32 bytes: at is in
// Unix nanoseconds (a time.Time takes 24).
type usageReading struct {
	at         int64
	cpu        time.Duration
	workingSet uint64
	peak       uint64
}

// NewUsage returns an empty store that keeps UsageSamples readings per
// container and forgets a container no reading came for in retention
// (DefaultUsageRetention when 0).
func NewUsage(retention time.Duration) *Usage {
	if retention <= 0 {
		retention = DefaultUsageRetention
	}
	return &Usage{retention: retention, containers: map[usageKey]*usageRing{}}
}

// Add keeps the readings; one not newer than its container's newest (a
// reading resent after a reconnect) is dropped.
func (u *Usage) Add(samples ...UsageSample) {
	u.mu.Lock()
	defer u.mu.Unlock()
	for _, s := range samples {
		if s.At.After(u.newest) {
			u.newest = s.At
		}
		k := usageKey{s.PodUID, s.Container}
		r := u.containers[k]
		if r == nil {
			r = &usageRing{}
			u.containers[k] = r
		}
		if r.n > 0 && s.At.UnixNano() <= r.at(r.n-1).at {
			continue
		}
		rd := usageReading{at: s.At.UnixNano(), cpu: s.CPU, workingSet: s.WorkingSet, peak: s.Peak}
		if r.n < len(r.readings) {
			r.readings[(r.start+r.n)%len(r.readings)] = rd
			r.n++
		} else {
			r.readings[r.start] = rd
			r.start = (r.start + 1) % len(r.readings)
		}
	}
	u.sweep()
}

func (r *usageRing) at(i int) *usageReading {
	return &r.readings[(r.start+i)%len(r.readings)]
}

// Since appends to dst the container's readings newer than after, oldest
// first, and returns it.
func (u *Usage) Since(podUID types.UID, container string, after time.Time, dst []UsageSample) []UsageSample {
	u.mu.Lock()
	defer u.mu.Unlock()
	r := u.containers[usageKey{podUID, container}]
	if r == nil {
		return dst
	}
	for i := range r.n {
		rd := r.at(i)
		if rd.at > after.UnixNano() || after.IsZero() {
			dst = append(dst, rd.sample(podUID, container))
		}
	}
	return dst
}

// Latest returns the container's newest reading, and false when the store
// holds none.
func (u *Usage) Latest(podUID types.UID, container string) (UsageSample, bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	r := u.containers[usageKey{podUID, container}]
	if r == nil || r.n == 0 {
		return UsageSample{}, false
	}
	return r.at(r.n-1).sample(podUID, container), true
}

func (rd *usageReading) sample(podUID types.UID, container string) UsageSample {
	return UsageSample{PodUID: podUID, Container: container, At: time.Unix(0, rd.at), CPU: rd.cpu,
		WorkingSet: rd.workingSet, Peak: rd.peak}
}

// Gone forgets a container whose cgroup its agent found removed.
func (u *Usage) Gone(podUID types.UID, container string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	delete(u.containers, usageKey{podUID, container})
}

// Len returns the containers and readings held.
func (u *Usage) Len() (containers, readings int) {
	u.mu.Lock()
	defer u.mu.Unlock()
	for _, r := range u.containers {
		readings += r.n
	}
	return len(u.containers), readings
}

// sweep forgets, at most once a minute of reading time, the containers no
// reading came for within the retention; u.mu is held.
func (u *Usage) sweep() {
	if u.newest.Sub(u.lastSweep) < time.Minute {
		return
	}
	u.lastSweep = u.newest
	cut := u.newest.Add(-u.retention).UnixNano()
	for k, r := range u.containers {
		if r.n == 0 || r.at(r.n-1).at < cut {
			delete(u.containers, k)
		}
	}
}
