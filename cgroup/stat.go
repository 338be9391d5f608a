package cgroup

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"time"
)

// ErrMalformed is matched (errors.Is) by every error about a cgroup file's
// content: a non-numeric value, a missing or repeated key, a truncated line
// or an overflow.
var ErrMalformed = errors.New("malformed cgroup file")

// malformedError is a content error; its message says what is wrong and
// where, and it matches ErrMalformed.
type malformedError struct{ msg string }

func (e *malformedError) Error() string        { return e.msg }
func (e *malformedError) Is(target error) bool { return target == ErrMalformed }

func malformed(format string, args ...any) error {
	return &malformedError{msg: fmt.Sprintf(format, args...)}
}

// CPUStat holds the CFS bandwidth counters of cpu.stat, the same on v1 and
// v2. They are cumulative since the cgroup was created.
type CPUStat struct {
	// Periods is nr_periods: enforcement periods in which the cgroup had
	// runnable tasks.
	Periods uint64
	// Throttled is nr_throttled: periods in which the cgroup hit its quota.
	Throttled uint64
	// ThrottledTime is the total time tasks were throttled: v2's
	// throttled_usec or v1's throttled_time (nanoseconds).
	ThrottledTime time.Duration
	// Usage is v2's usage_usec: the CPU time the cgroup's tasks consumed.
	// It is zero on v1, whose cpu.stat has no usage (cpuacct.usage has it;
	// see UsageReader).
	Usage time.Duration
}

// ParseCPUStat parses the content of cpu.stat, v1 or v2. It needs
// nr_periods, nr_throttled, and throttled_usec (v2) or throttled_time (v1);
// it reads usage_usec (v2) when present; other keys are ignored. On error s
// is left unchanged.
func ParseCPUStat(data []byte, s *CPUStat) error {
	out, seen, err := scanCPUStat(data)
	if err != nil {
		return err
	}
	switch {
	case seen&cpuStatPeriods == 0:
		return malformed("missing key nr_periods")
	case seen&cpuStatThrottled == 0:
		return malformed("missing key nr_throttled")
	case seen&(cpuStatUsec|cpuStatNsec) == 0:
		return malformed("missing key throttled_usec (v2) or throttled_time (v1)")
	case seen&(cpuStatUsec|cpuStatNsec) == cpuStatUsec|cpuStatNsec:
		return malformed("both throttled_usec (v2) and throttled_time (v1) present")
	}
	*s = out
	return nil
}

// ParseCPUStatUsage parses usage_usec out of cgroup v2's cpu.stat into d.
// Unlike ParseCPUStat it does not need the CFS counters, which v2 shows only
// where the cpu controller is enabled; usage_usec is always there. Other
// keys are ignored, but a repeated or malformed known key is an error. On
// error d is left unchanged.
func ParseCPUStatUsage(data []byte, d *time.Duration) error {
	out, seen, err := scanCPUStat(data)
	if err != nil {
		return err
	}
	if seen&cpuStatUsage == 0 {
		return malformed("missing key usage_usec")
	}
	*d = out.Usage
	return nil
}

// The keys of cpu.stat that scanCPUStat reads, as bits of its seen set:
// bit 1<<i is cpuStatKeys[i].
const (
	cpuStatPeriods = 1 << iota
	cpuStatThrottled
	cpuStatUsec
	cpuStatNsec
	cpuStatUsage
)

var cpuStatKeys = []string{"nr_periods", "nr_throttled", "throttled_usec", "throttled_time", "usage_usec"}

// scanCPUStat reads the known keys of cpu.stat and says which it saw; the
// callers decide which are required.
func scanCPUStat(data []byte) (CPUStat, uint8, error) {
	var out CPUStat
	sc := kvScanner{data: data}
	for sc.nextKnown(cpuStatKeys) {
		v := sc.num
		switch sc.bit {
		case cpuStatPeriods:
			out.Periods = v
		case cpuStatThrottled:
			out.Throttled = v
		case cpuStatUsec, cpuStatUsage:
			if v > math.MaxInt64/uint64(time.Microsecond) {
				return CPUStat{}, 0, sc.malformed("value overflows a duration")
			}
			if sc.bit == cpuStatUsec {
				out.ThrottledTime = time.Duration(v) * time.Microsecond
			} else {
				out.Usage = time.Duration(v) * time.Microsecond
			}
		case cpuStatNsec:
			if v > math.MaxInt64 {
				return CPUStat{}, 0, sc.malformed("value overflows a duration")
			}
			out.ThrottledTime = time.Duration(v)
		}
	}
	if sc.err != nil {
		return CPUStat{}, 0, sc.err
	}
	return out, sc.seen, nil
}

// ParseValue parses a cgroup file that holds one decimal number and a
// newline, as the kernel writes cpuacct.usage, memory.usage_in_bytes,
// memory.max_usage_in_bytes (v1), memory.current and memory.peak (v2). On
// error v is left unchanged.
func ParseValue(data []byte, v *uint64) error {
	n := len(data)
	if n == 0 {
		return malformed("empty: want a decimal integer and a newline")
	}
	if data[n-1] != '\n' {
		return malformed("truncated: no newline at end of %q", quoteBytes(data))
	}
	digits := data[:n-1]
	if len(digits) == 0 {
		return malformed("empty value: want a decimal integer")
	}
	var x uint64
	for _, c := range digits {
		if c < '0' || c > '9' {
			return malformed("value %q: not a decimal integer", quoteBytes(digits))
		}
		d := uint64(c - '0')
		if x > (math.MaxUint64-d)/10 {
			return malformed("value %q: overflows uint64", quoteBytes(digits))
		}
		x = x*10 + d
	}
	*v = x
	return nil
}

// ParseCPUAcctUsage parses cgroup v1's cpuacct.usage, the CPU time in
// nanoseconds the cgroup's tasks consumed, into d. On error d is left
// unchanged.
func ParseCPUAcctUsage(data []byte, d *time.Duration) error {
	var v uint64
	if err := ParseValue(data, &v); err != nil {
		return err
	}
	if v > math.MaxInt64 {
		return malformed("value %d: overflows a duration", v)
	}
	*d = time.Duration(v)
	return nil
}

// MemoryStat holds the key of memory.stat that the working set needs.
type MemoryStat struct {
	// InactiveFile is the page cache on the inactive LRU list of the cgroup
	// and its descendants, which the kernel reclaims first: v2's
	// inactive_file, v1's total_inactive_file (v1's inactive_file counts
	// the cgroup alone, while memory.usage_in_bytes counts its
	// descendants too).
	InactiveFile uint64
}

// ParseMemoryStatV1 parses cgroup v1's memory.stat. It needs
// total_inactive_file; other keys are ignored. On error s is left unchanged.
func ParseMemoryStatV1(data []byte, s *MemoryStat) error {
	return parseMemoryStat(data, "total_inactive_file", s)
}

// ParseMemoryStatV2 parses cgroup v2's memory.stat. It needs inactive_file;
// other keys are ignored. On error s is left unchanged.
func ParseMemoryStatV2(data []byte, s *MemoryStat) error {
	return parseMemoryStat(data, "inactive_file", s)
}

// parseMemoryStat parses memory.stat for its one key, inactiveFile, the
// version's name of the hierarchical inactive_file.
func parseMemoryStat(data []byte, inactiveFile string, s *MemoryStat) error {
	var out MemoryStat
	keys := [...]string{inactiveFile}
	sc := kvScanner{data: data}
	for sc.nextKnown(keys[:]) {
		out.InactiveFile = sc.num
	}
	if sc.err != nil {
		return sc.err
	}
	if err := sc.missing(keys[:], 1); err != nil {
		return err
	}
	*s = out
	return nil
}

// MemoryEvents holds the OOM counters of cgroup v2's memory.events. They
// are cumulative and include the cgroup's descendants.
type MemoryEvents struct {
	// OOM is oom: times the cgroup's memory limit was hit and reclaim failed.
	OOM uint64
	// OOMKill is oom_kill: processes in the cgroup killed by an OOM killer.
	OOMKill uint64
	// OOMGroupKill is oom_group_kill: group OOM kills (memory.oom.group).
	// Older kernels lack the key; it then reads zero.
	OOMGroupKill uint64
}

// ParseMemoryEvents parses the content of memory.events. It needs oom and
// oom_kill; other keys are ignored. On error e is left unchanged.
func ParseMemoryEvents(data []byte, e *MemoryEvents) error {
	const ( // bit 1<<i is memoryEventsKeys[i]
		oom = 1 << iota
		oomKill
		oomGroupKill
	)
	var out MemoryEvents
	sc := kvScanner{data: data}
	for sc.nextKnown(memoryEventsKeys) {
		switch sc.bit {
		case oom:
			out.OOM = sc.num
		case oomKill:
			out.OOMKill = sc.num
		case oomGroupKill:
			out.OOMGroupKill = sc.num
		}
	}
	if sc.err != nil {
		return sc.err
	}
	if err := sc.missing(memoryEventsKeys, oom|oomKill); err != nil {
		return err
	}
	*e = out
	return nil
}

var memoryEventsKeys = []string{"oom", "oom_kill", "oom_group_kill"}

// OOMControl holds cgroup v1's memory.oom_control.
type OOMControl struct {
	// KillDisabled is oom_kill_disable: the OOM killer is off for the
	// cgroup, whose tasks then wait at the limit instead.
	KillDisabled bool
	// UnderOOM is under_oom: the cgroup is at its limit right now.
	UnderOOM bool
	// OOMKill is oom_kill: processes in the cgroup killed by the OOM killer.
	OOMKill uint64
}

// ParseOOMControl parses the content of memory.oom_control. It needs
// oom_kill_disable, under_oom and oom_kill (Linux 4.13 and later); other
// keys are ignored. On error c is left unchanged.
func ParseOOMControl(data []byte, c *OOMControl) error {
	const ( // bit 1<<i is oomControlKeys[i]
		killDisable = 1 << iota
		underOOM
		oomKill
	)
	var out OOMControl
	sc := kvScanner{data: data}
	for sc.nextKnown(oomControlKeys) {
		switch sc.bit {
		case killDisable:
			out.KillDisabled = sc.num != 0
		case underOOM:
			out.UnderOOM = sc.num != 0
		case oomKill:
			out.OOMKill = sc.num
		}
	}
	if sc.err != nil {
		return sc.err
	}
	if err := sc.missing(oomControlKeys, killDisable|underOOM); err != nil {
		return err
	}
	if sc.seen&oomKill == 0 {
		return malformed("missing key oom_kill (Linux 4.13 or later)")
	}
	*c = out
	return nil
}

var oomControlKeys = []string{"oom_kill_disable", "under_oom", "oom_kill"}

// kvScanner walks the "key value\n" lines of a flat-keyed cgroup file
// without allocating. Empty lines are skipped; every line must end with a
// newline, as the kernel writes them, so a cut-off read is caught.
type kvScanner struct {
	data     []byte
	line     int
	key, val []byte
	err      error
	// Set by nextKnown: the current key's bit, its value, and the bits of
	// the known keys read so far.
	bit, seen uint8
	num       uint64
}

// next moves to the next line; it returns false at the end or on error.
func (s *kvScanner) next() bool {
	for len(s.data) > 0 {
		s.line++
		i := bytes.IndexByte(s.data, '\n')
		if i < 0 {
			s.err = malformed("line %d: truncated: no newline at end of %q", s.line, quoteBytes(s.data))
			return false
		}
		line := s.data[:i]
		s.data = s.data[i+1:]
		if len(line) == 0 {
			continue
		}
		j := bytes.IndexByte(line, ' ')
		if j <= 0 || j == len(line)-1 {
			s.err = malformed("line %d: %q: want \"key value\"", s.line, quoteBytes(line))
			return false
		}
		s.key, s.val = line[:j], line[j+1:]
		return true
	}
	return false
}

// nextKnown moves to the next line whose key is one of keys (at most 8),
// skipping the others, and parses its value: s.bit is 1<<i for keys[i],
// s.num the value, and s.seen gains s.bit. A known key read twice or a
// value that is not a decimal uint64 is an error. It returns false at the
// end or on error (s.err).
func (s *kvScanner) nextKnown(keys []string) bool {
	for s.next() {
		bit := keyBit(keys, s.key)
		if bit == 0 {
			continue
		}
		if s.seen&bit != 0 {
			s.err = s.malformed("repeated key")
			return false
		}
		v, err := s.uint()
		if err != nil {
			s.err = err
			return false
		}
		s.bit, s.num, s.seen = bit, v, s.seen|bit
		return true
	}
	return false
}

// missing returns the error for the first of the required keys (bit 1<<i
// for keys[i], as nextKnown) that nextKnown did not read, or nil.
func (s *kvScanner) missing(keys []string, required uint8) error {
	for i, k := range keys {
		if bit := uint8(1) << i; required&bit != 0 && s.seen&bit == 0 {
			return malformed("missing key %s", k)
		}
	}
	return nil
}

// keyBit returns 1<<i for key == keys[i], or 0. Neither key nor a keys
// entry is empty (next never yields an empty key).
func keyBit(keys []string, key []byte) uint8 {
	for i, k := range keys {
		if len(k) == len(key) && k[0] == key[0] && string(key) == k {
			return 1 << i
		}
	}
	return 0
}

// uint parses the current value as a decimal uint64.
func (s *kvScanner) uint() (uint64, error) {
	var v uint64
	for _, c := range s.val {
		if c < '0' || c > '9' {
			return 0, s.malformed("not a decimal integer")
		}
		d := uint64(c - '0')
		if v > (math.MaxUint64-d)/10 {
			return 0, s.malformed("value overflows uint64")
		}
		v = v*10 + d
	}
	return v, nil
}

// malformed returns an error about the current line.
func (s *kvScanner) malformed(what string) error {
	return malformed("line %d: %s %q: %s", s.line, quoteBytes(s.key), quoteBytes(s.val), what)
}

// quoteBytes returns b as a string of at most 64 bytes for an error message.
func quoteBytes(b []byte) string {
	const max = 64
	if len(b) > max {
		return string(b[:max]) + "..."
	}
	return string(b)
}
