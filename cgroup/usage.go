package cgroup

import (
	"errors"
	"fmt"
	"os"
	"time"
)

// Usage is what a container consumed, read from its cgroup files by
// UsageReader: the figures the recommender sizes requests from (issue 13),
// under cadvisor's definitions so they match what users see in
// container_cpu_usage_seconds_total, container_memory_working_set_bytes and
// container_memory_max_usage_bytes.
type Usage struct {
	// CPU is the CPU time the cgroup's tasks consumed since it was
	// created: v1's cpuacct.usage, v2's cpu.stat usage_usec.
	CPU time.Duration
	// Memory is the memory charged to the cgroup now, page cache included:
	// v1's memory.usage_in_bytes, v2's memory.current.
	Memory uint64
	// WorkingSet is Memory less the inactive page cache (see WorkingSet),
	// the memory the cgroup cannot give back without paging: what the
	// kubelet evicts on and what an OOM kill is near.
	WorkingSet uint64
	// Peak is the highest Memory since the cgroup was created: v1's
	// memory.max_usage_in_bytes, v2's memory.peak. It includes page cache,
	// as Memory does, so it is at least Memory and WorkingSet. It is zero
	// when PeakAvailable is false.
	//
	// The agent never resets it: it only reads cgroup files, and a reset
	// (writing to v1's file) would change it for every other reader. The
	// peak since the previous report is the caller's: see IntervalPeak.
	Peak uint64
	// PeakAvailable is false where the kernel has no peak file: cgroup v2
	// before Linux 5.19, which lacks memory.peak. The caller then takes the
	// largest Memory it sampled instead.
	PeakAvailable bool
}

// WorkingSet returns a cgroup's working set from its memory usage and its
// inactive page cache: usage - inactiveFile, or 0 when the inactive cache
// exceeds the usage (the two files are not read at one instant). This is
// cadvisor's rule, which the kubelet and metrics-server use too: see
// setMemoryStats in github.com/google/cadvisor container/libcontainer/handler.go,
// which takes memory.usage_in_bytes less memory.stat's total_inactive_file
// on v1 and memory.current less inactive_file on v2.
func WorkingSet(usage, inactiveFile uint64) uint64 {
	if inactiveFile > usage {
		return 0
	}
	return usage - inactiveFile
}

// IntervalPeak returns the memory peak of the interval between two readings
// of one cgroup, prev and cur (prev is the zero Usage for the first
// report), given sampledMax, the largest Memory the caller read within the
// interval. A kernel peak that grew was reached within the interval, so it
// is the interval's peak exactly; one that did not grow was reached before,
// and the interval's peak is then only known from the samples (as it is
// where the kernel has no peak file).
func IntervalPeak(prev, cur Usage, sampledMax uint64) uint64 {
	if cur.PeakAvailable && cur.Peak > prev.Peak {
		return cur.Peak
	}
	return max(sampledMax, cur.Memory)
}

// memoryStatSize fits a memory.stat (about 1.2 KiB on v1, 1.6 KiB on v2)
// in the first read.
const memoryStatSize = 4096

// UsageReader reads a container's Usage from the files its cgroup version
// has, kept open and re-read with pread like the other readers, so a pass
// does not allocate. It is not safe for concurrent use.
type UsageReader struct {
	// cpu is cpu.stat on v2, cpuacct.usage on v1.
	cpu   file
	cpuV2 bool
	// memory is memory.current on v2, memory.usage_in_bytes on v1; stat is
	// memory.stat; peak is memory.peak or memory.max_usage_in_bytes, open
	// only when hasPeak.
	memory, stat, peak file
	memoryV2, hasPeak  bool
}

// OpenUsage opens the usage files of cgroupPath: in the cpuacct controller's
// v1 tree (or the v2 tree) and the memory controller's.
func (h *Hierarchy) OpenUsage(cgroupPath string) (*UsageReader, error) {
	cpu, ok := h.Controller("cpuacct")
	if !ok {
		if cpu, ok = h.Unified(); !ok {
			return nil, errors.New("cgroup controller \"cpuacct\" is not mounted, and there is no cgroup v2 tree")
		}
	}
	mem, ok := h.Controller("memory")
	if !ok {
		return nil, errors.New("cgroup controller \"memory\" is not mounted")
	}
	cpuDir, err := cpu.Join(cgroupPath)
	if err != nil {
		return nil, err
	}
	memDir, err := mem.Join(cgroupPath)
	if err != nil {
		return nil, err
	}
	return OpenUsageAt(cpu, cpuDir, mem, memDir)
}

// OpenUsageAt opens the usage files of a cgroup whose CPU accounting is in
// cpuDir, a directory of mount cpu (v1 cpuacct or v2), and whose memory
// accounting is in memDir, a directory of mount mem. A missing file is
// ErrGone, except v2's memory.peak, which old kernels lack: the reader then
// reports PeakAvailable false.
func OpenUsageAt(cpu Mount, cpuDir string, mem Mount, memDir string) (_ *UsageReader, err error) {
	r := &UsageReader{cpuV2: cpu.Version == 2, memoryV2: mem.Version == 2}
	var opened []*file
	defer func() {
		if err != nil {
			for _, f := range opened {
				_ = f.close()
			}
		}
	}()
	open := func(dst *file, dir, name string, size int) error {
		f, err := openFileSize(dir, name, size)
		if err != nil {
			return fmt.Errorf("open usage of %s: %w", dir, err)
		}
		*dst = f
		opened = append(opened, dst)
		return nil
	}
	cpuFile, memFile, statFile, peakFile := "cpuacct.usage", "memory.usage_in_bytes", "memory.stat", "memory.max_usage_in_bytes"
	if r.cpuV2 {
		cpuFile = "cpu.stat"
	}
	if r.memoryV2 {
		memFile, peakFile = "memory.current", "memory.peak"
	}
	cpuSize := 64 // one number
	if r.cpuV2 {
		cpuSize = 512
	}
	if err := open(&r.cpu, cpuDir, cpuFile, cpuSize); err != nil {
		return nil, err
	}
	if err := open(&r.memory, memDir, memFile, 64); err != nil {
		return nil, err
	}
	if err := open(&r.stat, memDir, statFile, memoryStatSize); err != nil {
		return nil, err
	}
	err = open(&r.peak, memDir, peakFile, 64)
	switch {
	case err == nil:
		r.hasPeak = true
	case r.memoryV2 && errors.Is(err, ErrGone):
		// memory.peak is missing: an old kernel, unless the whole cgroup
		// went away after the files above were opened.
		if _, serr := os.Stat(memDir); serr != nil {
			return nil, fmt.Errorf("open usage of %s: %w", memDir, gone(serr))
		}
		err = nil
	default:
		return nil, err
	}
	return r, nil
}

// Read reads the cgroup's usage into u; it does not allocate. Memory is
// read before the peak, so Peak is at least Memory. On error u is left
// unchanged; a removed cgroup is ErrGone, bad content ErrMalformed.
func (r *UsageReader) Read(u *Usage) error {
	var out Usage
	data, err := r.cpu.read()
	if err != nil {
		return err
	}
	if r.cpuV2 {
		err = ParseCPUStatUsage(data, &out.CPU)
	} else {
		err = ParseCPUAcctUsage(data, &out.CPU)
	}
	if err != nil {
		return fmt.Errorf("parse %s: %w", r.cpu.path, err)
	}
	if err := readValue(&r.memory, &out.Memory); err != nil {
		return err
	}
	if data, err = r.stat.read(); err != nil {
		return err
	}
	var s MemoryStat
	if r.memoryV2 {
		err = ParseMemoryStatV2(data, &s)
	} else {
		err = ParseMemoryStatV1(data, &s)
	}
	if err != nil {
		return fmt.Errorf("parse %s: %w", r.stat.path, err)
	}
	out.WorkingSet = WorkingSet(out.Memory, s.InactiveFile)
	if r.hasPeak {
		if err := readValue(&r.peak, &out.Peak); err != nil {
			return err
		}
		out.PeakAvailable = true
	}
	*u = out
	return nil
}

// ReadMemory reads only the cgroup's memory usage now (Usage.Memory) into
// v; it does not allocate. It is one small file, about a tenth of a full
// Read (whose memory.stat is most of the cost), so a caller can sample the
// memory between full reads for IntervalPeak's sampledMax.
func (r *UsageReader) ReadMemory(v *uint64) error {
	return readValue(&r.memory, v)
}

// ShareStatBuffer makes the reader read memory.stat into *buf (grown as
// needed) instead of a buffer of its own, and frees its own: readers that
// are read one at a time (a sampler's) can share one, saving 4 KiB per
// container. buf must not be used concurrently.
func (r *UsageReader) ShareStatBuffer(buf *[]byte) {
	r.stat.shared, r.stat.buf = buf, nil
}

// readValue reads a one-number file into v.
func readValue(f *file, v *uint64) error {
	data, err := f.read()
	if err != nil {
		return err
	}
	if err := ParseValue(data, v); err != nil {
		return fmt.Errorf("parse %s: %w", f.path, err)
	}
	return nil
}

// Close closes the files.
func (r *UsageReader) Close() error {
	errs := []error{r.cpu.close(), r.memory.close(), r.stat.close()}
	if r.hasPeak {
		errs = append(errs, r.peak.close())
	}
	return errors.Join(errs...)
}
