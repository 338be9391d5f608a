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
	// NotFound counts containers whose cgroup was not there at their
	// first open: a running container's cgroup is made before the kubelet
	// says it runs, so the layout (--cgroup-driver, --kubelet-cgroup-root)
	// is not the kubelet's, or it exited in between. NotFoundPath is the
	// first such path.
	NotFound     int
	NotFoundPath string
	// Usage counts the containers whose usage was read in full (CPU,
	// memory, memory.stat, peak): every container on a pass the usage
	// interval made due, and a container's first pass.
	Usage int
	// Err is the first error of the pass, nil when there was none.
	Err error
}

// SamplerStats are the sampler's running totals, for its health metrics.
type SamplerStats struct {
	// Samples counts successful cpu.stat reads.
	Samples uint64
	// UsageReads counts successful full usage reads.
	UsageReads uint64
	// ReadErrors counts failed opens and reads of cpu.stat and of the
	// usage files other than a gone cgroup.
	ReadErrors uint64
	// Gone counts containers whose cgroup was found removed.
	Gone uint64
	// NotFound counts containers whose cgroup was never found (Pass).
	NotFound uint64
	// Tracked is the number of containers tracked now.
	Tracked int
}

// tracked is a container and the open readers of its cpu.stat and usage.
type tracked struct {
	c    Container
	r    *cgroup.CPUStatReader
	stat cgroup.CPUStat
	last report.Sample
	// u reads the usage files; nil until the first usage read opens it.
	u *cgroup.UsageReader
	// noUsage is set when the usage files were found missing while
	// cpu.stat was there (a layout whose memory or cpuacct cgroups are
	// elsewhere): the counters go on, usage is not tried again.
	noUsage bool
	// reading is the latest full usage reading, the base of the next
	// interval's peak; usage is what was made of it for the report, and
	// usageOK says both hold one.
	reading cgroup.Usage
	usage   report.Usage
	usageOK bool
	// oom reads the kernel's cumulative OOM kill counter of the
	// container's memory cgroup; nil until the first due pass opens it,
	// and noOOM is set when it cannot be opened (not tried again).
	oom   cgroup.OOMKillReader
	noOOM bool
	// memMax is the largest memory usage sampled since the latest full
	// reading (the passes between usage reads read memory alone), and
	// maxUsage the largest since tracking began, exported where the
	// kernel keeps no peak.
	memMax, maxUsage uint64
	seq              uint64 // order of adding, newest highest
	sampled          bool   // last holds a reading
	changed          bool   // last changed in the latest pass
	gone             bool   // the cgroup was removed; r is closed
	// labels are the Collector's label pairs of c, made at its first
	// scrape and shared by every scrape after; cpuLabels add cadvisor's
	// cpu="total" for container_cpu_usage_seconds_total.
	labels, cpuLabels []*dto.LabelPair
}

// Sampler reads the cpu.stat of a set of containers through files it keeps
// open, and keeps each one's latest sample (docs/design.md section 5).
// Every usage interval (SetUsageInterval) a pass also reads each
// container's usage (CPU, working set, memory peak), and the passes between
// read its memory usage alone, so the peak of an interval is seen even
// where the kernel's lifetime peak did not grow. A pass does not allocate
// once every container's files are open. It is safe for concurrent use;
// Sample is meant to be called from one goroutine.
type Sampler struct {
	open func(cgroupPath string) (*cgroup.CPUStatReader, error)
	// openUsage opens a container's usage files; nil when the node has no
	// memory controller or CPU accounting, and then no usage is read.
	openUsage func(cgroupPath string) (*cgroup.UsageReader, error)
	// openOOM opens a container's OOM kill counter (memory.events on v2,
	// memory.oom_control on v1); nil without a memory controller.
	openOOM func(cgroupPath string) (cgroup.OOMKillReader, error)

	mu      sync.Mutex
	entries []*tracked
	index   map[report.ContainerKey]int
	// goneBefore holds the cgroup paths of the containers the latest Set
	// dropped as gone: discovery, a little behind the kernel, may list
	// one once more, and its cgroup not found then is gone, not a layout
	// the agent cannot read.
	goneBefore map[string]struct{}
	seq        uint64
	stats      SamplerStats
	// usageInterval is how often usage is read in full; 0 is every pass.
	usageInterval time.Duration
	lastUsage     time.Time
	// statBuf is the memory.stat buffer every usage reader shares: a pass
	// reads them one at a time.
	statBuf []byte
}

// NewSampler returns a sampler that finds containers' cpu.stat in h's cpu
// hierarchy, and their usage in its cpuacct (or v2) and memory
// hierarchies when h has both; otherwise it reads no usage (UsageEnabled).
// It reads usage on every pass until SetUsageInterval says otherwise.
func NewSampler(h *cgroup.Hierarchy) *Sampler {
	s := &Sampler{open: h.OpenCPUStat, index: map[report.ContainerKey]int{}}
	_, cpuacct := h.Controller("cpuacct")
	_, unified := h.Unified()
	_, memory := h.Controller("memory")
	if memory && (cpuacct || unified) {
		s.openUsage = h.OpenUsage
	}
	if memory {
		s.openOOM = h.OpenOOMKills
	}
	return s
}

// UsageEnabled reports whether the sampler reads usage: the node has CPU
// accounting and a memory controller.
func (s *Sampler) UsageEnabled() bool { return s.openUsage != nil }

// SetUsageInterval makes a pass read usage in full only when d has passed
// since the last pass that did (within a twentieth of d, the jitter of a
// ticker's passes), and a container's first pass; 0 reads it every pass.
// Reading memory.stat is most of a usage read's cost (docs/kernel.md), so
// the agent reads usage less often than the throttling counters.
func (s *Sampler) SetUsageInterval(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.usageInterval = d
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
	clear(s.goneBefore)
	for i := len(s.entries) - 1; i >= 0; i-- {
		e := s.entries[i]
		if _, ok := want[e.c.Key()]; !ok || e.gone {
			if e.gone {
				if s.goneBefore == nil {
					s.goneBefore = map[string]struct{}{}
				}
				s.goneBefore[e.c.CgroupPath] = struct{}{}
			}
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

// Sample reads every tracked container's cpu.stat, and its usage when due
// (see SetUsageInterval) or its memory usage alone otherwise, and keeps the
// readings, stamped now. A container whose cgroup is gone keeps its last
// sample until the next Set drops it; other errors are counted and the
// container is read again next pass (its usage on the next due pass).
func (s *Sampler) Sample(now time.Time) Pass {
	s.mu.Lock()
	defer s.mu.Unlock()
	var p Pass
	due := s.usageInterval <= 0 || s.lastUsage.IsZero() || now.Sub(s.lastUsage) >= s.usageInterval-s.usageInterval/20
	if due {
		s.lastUsage = now
	}
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
				if _, ok := s.goneBefore[e.c.CgroupPath]; ok && errors.Is(err, cgroup.ErrGone) {
					e.gone = true // listed once more after it went
					p.Gone++
					continue
				}
				if errors.Is(err, cgroup.ErrGone) {
					e.gone = true
					p.NotFound++
					if p.NotFoundPath == "" {
						p.NotFoundPath = e.c.CgroupPath
					}
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
		changed := !e.sampled || e.stat.Periods != e.last.Periods ||
			e.stat.Throttled != e.last.Throttled || e.stat.ThrottledTime != e.last.ThrottledTime
		e.last = report.Sample{
			Key:           report.ContainerKey{PodUID: e.c.PodUID, Name: e.c.Name},
			At:            now,
			Periods:       e.stat.Periods,
			Throttled:     e.stat.Throttled,
			ThrottledTime: e.stat.ThrottledTime,
			// The OOM kill count is read on due passes only and kept
			// between them.
			OOMKills: e.last.OOMKills, HasOOMKills: e.last.HasOOMKills,
		}
		e.sampled = true
		if s.openUsage != nil && !e.noUsage {
			read, err := s.readUsage(e, due || !e.usageOK)
			switch {
			case errors.Is(err, cgroup.ErrGone):
				// cpu.stat was just read: the throttling counters, the
				// health watch's signal, must not depend on the usage.
				if e.u != nil {
					_ = e.u.Close()
					e.u = nil
				}
				e.noUsage = true
				p.Errors++
				fail(fmt.Errorf("%w; usage of %s is not read again", err, e.c.CgroupPath))
			case err != nil:
				p.Errors++
				fail(err)
			case read:
				p.Usage++
				e.last.Usage, e.last.HasUsage = e.usage, true
				changed = true
			}
		}
		if due && s.openOOM != nil && !e.noOOM {
			kills, had := e.last.OOMKills, e.last.HasOOMKills
			if err := s.readOOMKills(e); err != nil {
				p.Errors++
				fail(err)
			}
			// A new OOM kill count is a change the stream must send, even
			// on a node without usage files.
			changed = changed || e.last.HasOOMKills && (!had || e.last.OOMKills != kills)
		}
		e.changed = changed
		if e.changed {
			p.Changed++
		}
	}
	s.stats.Samples += uint64(p.Read)
	s.stats.UsageReads += uint64(p.Usage)
	s.stats.ReadErrors += uint64(p.Errors)
	s.stats.NotFound += uint64(p.NotFound)
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

// readUsage reads e's usage in full when full is true, making the
// report's figures and the interval's peak of it, or else its memory usage
// alone, into memMax. It returns whether it read in full.
func (s *Sampler) readUsage(e *tracked, full bool) (bool, error) {
	if e.u == nil {
		if !full {
			return false, nil
		}
		u, err := s.openUsage(e.c.CgroupPath)
		if err != nil {
			return false, err // it names the cgroup
		}
		u.ShareStatBuffer(&s.statBuf)
		e.u = u
	}
	if !full {
		var m uint64
		if err := e.u.ReadMemory(&m); err != nil {
			return false, fmt.Errorf("read memory usage of %s: %w", e.c.CgroupPath, err)
		}
		e.memMax = max(e.memMax, m)
		return false, nil
	}
	var cur cgroup.Usage
	if err := e.u.Read(&cur); err != nil {
		return false, fmt.Errorf("read usage of %s: %w", e.c.CgroupPath, err)
	}
	var prev cgroup.Usage
	if e.usageOK {
		prev = e.reading
	}
	peak := cgroup.IntervalPeak(prev, cur, e.memMax)
	e.maxUsage = max(e.maxUsage, peak, cur.Peak)
	e.reading, e.memMax, e.usageOK = cur, 0, true
	e.usage = report.Usage{CPU: cur.CPU, WorkingSet: cur.WorkingSet, Peak: peak}
	return true, nil
}

// readOOMKills reads the kernel's count of OOM kills in e's memory cgroup
// since it was created into e.last: the absolute count, which an agent
// that restarted reads as it is, kills made while it was down included.
func (s *Sampler) readOOMKills(e *tracked) error {
	if e.oom == nil {
		r, err := s.openOOM(e.c.CgroupPath)
		if err != nil {
			e.noOOM = true
			if errors.Is(err, cgroup.ErrGone) {
				return nil // cpu.stat finds it gone on the next pass
			}
			return fmt.Errorf("open the OOM kill counter of %s: %w; not read again", e.c.CgroupPath, err)
		}
		e.oom = r
	}
	n, err := e.oom.OOMKills()
	if err != nil {
		if errors.Is(err, cgroup.ErrGone) {
			return nil
		}
		return fmt.Errorf("read the OOM kill counter of %s: %w", e.c.CgroupPath, err)
	}
	e.last.OOMKills, e.last.HasOOMKills = n, true
	return nil
}

// OOMKillCounts calls fn with the cgroup path and the kernel's cumulative
// OOM kill count of every tracked container whose counter was read, as of
// its latest read (every usage interval).
func (s *Sampler) OOMKillCounts(fn func(cgroupPath string, kills uint64)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range s.entries {
		if e.last.HasOOMKills {
			fn(e.c.CgroupPath, e.last.OOMKills)
		}
	}
}

// Tracks reports whether a tracked container's cgroup path is p.
func (s *Sampler) Tracks(p string) bool {
	_, ok := s.ByCgroup(p)
	return ok
}

func (e *tracked) close() {
	if e.r != nil {
		_ = e.r.Close()
		e.r = nil
	}
	if e.u != nil {
		_ = e.u.Close()
		e.u = nil
	}
	if e.oom != nil {
		_ = e.oom.Close()
		e.oom = nil
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
