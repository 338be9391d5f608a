package node

import (
	"errors"
	"fmt"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/kerf-dev/kerf/cgroup"
	"github.com/kerf-dev/kerf/node/report"
)

// Container is one pod container the agent samples.
type Container struct {
	// Namespace and Pod are the pod's metadata.namespace and metadata.name.
	Namespace, Pod string
	// PodUID is the pod's metadata.uid.
	PodUID string
	// Name is the container's name in the pod spec.
	Name string
	// ContainerID is containerStatuses[].containerID, e.g. "containerd://<id>".
	ContainerID string
	// QoS is the pod's status.qosClass.
	QoS cgroup.QoSClass
	// CgroupPath is the container's cgroup path within its hierarchy, e.g.
	// /kubepods/burstable/pod<uid>/<id>. Under the kubelet's layouts the cpu
	// and memory cgroups of a container share this path.
	CgroupPath string
}

// Key returns the key the stream reports the container under.
func (c *Container) Key() report.ContainerKey {
	return report.ContainerKey{PodUID: c.PodUID, Name: c.Name}
}

// ResolveCgroup sets CgroupPath from the pod's UID and QoS class and the
// container id, named as the kubelet with layout l names them.
func (c *Container) ResolveCgroup(l cgroup.Layout) error {
	p, err := l.ContainerDir(cgroup.PodCgroup{UID: c.PodUID, QoS: c.QoS}, c.ContainerID)
	if err != nil {
		return fmt.Errorf("cgroup of container %s/%s/%s: %w", c.Namespace, c.Pod, c.Name, err)
	}
	c.CgroupPath = p
	return nil
}

// Pass says what one Sample call did.
type Pass struct {
	// Read counts the containers whose cpu.stat was read.
	Read int
	// Changed counts the containers whose counters changed since their
	// previous reading (or that were read for the first time).
	Changed int
	// Errors counts failed opens and reads, not counting gone cgroups.
	Errors int
	// Gone counts containers found gone in this pass.
	Gone int
	// Err is the first error of the pass, nil when there was none.
	Err error
}

// SamplerStats are the sampler's running totals, for its health metrics.
type SamplerStats struct {
	// Samples counts successful cpu.stat reads.
	Samples uint64
	// ReadErrors counts failed opens and reads of cpu.stat other than a
	// gone cgroup.
	ReadErrors uint64
	// Gone counts containers whose cgroup was found removed.
	Gone uint64
	// Tracked is the number of containers tracked now.
	Tracked int
}

// tracked is a container and the open reader of its cpu.stat.
type tracked struct {
	c       Container
	r       *cgroup.CPUStatReader
	stat    cgroup.CPUStat
	last    report.Sample
	seq     uint64 // order of adding, newest highest
	sampled bool   // last holds a reading
	changed bool   // last changed in the latest pass
	gone    bool   // the cgroup was removed; r is closed
	// labels are the Collector's label pairs of c, made at its first
	// scrape and shared by every scrape after.
	labels []*dto.LabelPair
}

// Sampler reads the cpu.stat of a set of containers through files it keeps
// open, and keeps each one's latest sample (docs/design.md section 5). A
// pass does not allocate once every container's file is open. It is safe
// for concurrent use; Sample is meant to be called from one goroutine.
type Sampler struct {
	open func(cgroupPath string) (*cgroup.CPUStatReader, error)

	mu      sync.Mutex
	entries []*tracked
	index   map[report.ContainerKey]int
	seq     uint64
	stats   SamplerStats
}

// NewSampler returns a sampler that finds containers' cpu.stat in h's cpu
// hierarchy.
func NewSampler(h *cgroup.Hierarchy) *Sampler {
	return &Sampler{open: h.OpenCPUStat, index: map[report.ContainerKey]int{}}
}

func checkContainer(c *Container) error {
	if c.PodUID == "" || c.Name == "" {
		return fmt.Errorf("container %s/%s/%s: pod UID and name must be set", c.Namespace, c.Pod, c.Name)
	}
	if c.CgroupPath == "" {
		return fmt.Errorf("container %s/%s/%s: cgroup path must be set", c.Namespace, c.Pod, c.Name)
	}
	return nil
}

// Add starts tracking c, replacing a container with the same key. Its file
// is opened on the next pass.
func (s *Sampler) Add(c Container) error {
	if err := checkContainer(&c); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.addLocked(c)
	return nil
}

func (s *Sampler) addLocked(c Container) {
	k := c.Key()
	if i, ok := s.index[k]; ok {
		e := s.entries[i]
		if e.c == c && !e.gone {
			return
		}
		e.close()
		s.seq++
		s.entries[i] = &tracked{c: c, seq: s.seq}
		return
	}
	s.seq++
	s.index[k] = len(s.entries)
	s.entries = append(s.entries, &tracked{c: c, seq: s.seq})
	s.stats.Tracked = len(s.entries)
}

// Remove stops tracking the container with key k, if it is tracked.
func (s *Sampler) Remove(k report.ContainerKey) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.removeLocked(k)
}

func (s *Sampler) removeLocked(k report.ContainerKey) {
	i, ok := s.index[k]
	if !ok {
		return
	}
	s.entries[i].close()
	last := len(s.entries) - 1
	if i != last {
		s.entries[i] = s.entries[last]
		s.index[s.entries[i].c.Key()] = i
	}
	s.entries[last] = nil
	s.entries = s.entries[:last]
	delete(s.index, k)
	s.stats.Tracked = len(s.entries)
}

// Set makes cs the tracked set: containers not in it are dropped, as are
// those whose cgroup was found gone (one still in cs is tracked afresh);
// unchanged containers keep their open file and latest sample. A container
// without a pod UID, name or cgroup path is left out and named in the
// error; the rest are tracked.
func (s *Sampler) Set(cs []Container) error {
	var errs []error
	want := make(map[report.ContainerKey]struct{}, len(cs))
	for i := range cs {
		if err := checkContainer(&cs[i]); err != nil {
			errs = append(errs, err)
			continue
		}
		want[cs[i].Key()] = struct{}{}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := len(s.entries) - 1; i >= 0; i-- {
		e := s.entries[i]
		if _, ok := want[e.c.Key()]; !ok || e.gone {
			s.removeLocked(e.c.Key())
		}
	}
	for i := range cs {
		if _, ok := want[cs[i].Key()]; ok {
			s.addLocked(cs[i])
		}
	}
	return errors.Join(errs...)
}

// Sample reads every tracked container's cpu.stat and keeps the readings,
// stamped now. A container whose cgroup is gone keeps its last sample until
// the next Set drops it; other errors are counted and the container is
// read again next pass.
func (s *Sampler) Sample(now time.Time) Pass {
	s.mu.Lock()
	defer s.mu.Unlock()
	var p Pass
	fail := func(err error) {
		if p.Err == nil {
			p.Err = err
		}
	}
	for _, e := range s.entries {
		e.changed = false
		if e.gone {
			continue
		}
		if e.r == nil {
			r, err := s.open(e.c.CgroupPath)
			if err != nil {
				if errors.Is(err, cgroup.ErrGone) {
					e.gone = true
					p.Gone++
					continue
				}
				p.Errors++
				fail(fmt.Errorf("open cpu.stat of %s: %w", e.c.CgroupPath, err))
				continue
			}
			e.r = r
		}
		if err := e.r.Read(&e.stat); err != nil {
			if errors.Is(err, cgroup.ErrGone) {
				e.close()
				e.gone = true
				p.Gone++
				continue
			}
			p.Errors++
			fail(err)
			continue
		}
		p.Read++
		e.changed = !e.sampled || e.stat.Periods != e.last.Periods ||
			e.stat.Throttled != e.last.Throttled || e.stat.ThrottledTime != e.last.ThrottledTime
		if e.changed {
			p.Changed++
		}
		e.last = report.Sample{
			Key:           report.ContainerKey{PodUID: e.c.PodUID, Name: e.c.Name},
			At:            now,
			Periods:       e.stat.Periods,
			Throttled:     e.stat.Throttled,
			ThrottledTime: e.stat.ThrottledTime,
		}
		e.sampled = true
	}
	s.stats.Samples += uint64(p.Read)
	s.stats.ReadErrors += uint64(p.Errors)
	s.stats.Gone += uint64(p.Gone)
	return p
}

// Latest appends the latest sample of every container read at least once
// to dst and returns it.
func (s *Sampler) Latest(dst []report.Sample) []report.Sample {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range s.entries {
		if e.sampled {
			dst = append(dst, e.last)
		}
	}
	return dst
}

// Changed appends to dst the samples that changed in the latest pass (or
// were the container's first) and returns it, so a stream can send only
// those.
func (s *Sampler) Changed(dst []report.Sample) []report.Sample {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range s.entries {
		if e.changed {
			dst = append(dst, e.last)
		}
	}
	return dst
}

// Stats returns the sampler's running totals.
func (s *Sampler) Stats() SamplerStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stats
}

// Close closes every open file; the sampler must not be used after.
func (s *Sampler) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range s.entries {
		e.close()
	}
	s.entries, s.index = nil, map[report.ContainerKey]int{}
	s.stats.Tracked = 0
	return nil
}

// each calls fn with every tracked container, under the sampler's lock.
func (s *Sampler) each(fn func(e *tracked)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range s.entries {
		fn(e)
	}
}

func (e *tracked) close() {
	if e.r != nil {
		_ = e.r.Close()
		e.r = nil
	}
}

// ByCgroup returns the tracked container whose cgroup path is p: the OOM
// sources report kills by cgroup, and under the kubelet's layouts a
// container's memory and cpu cgroups share one path.
func (s *Sampler) ByCgroup(p string) (Container, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range s.entries {
		if e.c.CgroupPath == p {
			return e.c, true
		}
	}
	return Container{}, false
}
