package oom

import (
	"bytes"
	"errors"
	"fmt"
	"path"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// maxCommBytes is the longest command name the kernel keeps
// (TASK_COMM_LEN less its NUL).
const maxCommBytes = 15

// kmsgRecord is one record of /dev/kmsg
// (Documentation/ABI/testing/dev-kmsg):
// "<prio>,<seq>,<usec>,<flags>[,...];<message>\n", then dictionary lines
// that each begin with a space.
type kmsgRecord struct {
	// facility is the syslog facility: 0 for the kernel's own messages;
	// the kernel gives a record a process wrote to /dev/kmsg another one.
	facility int
	// at is the record's kernel timestamp, the time since boot.
	at time.Duration
	// message is the text with the kernel's \xNN escapes undone.
	message string
}

// errKmsgRecord is a record that is not in /dev/kmsg's format.
var errKmsgRecord = errors.New("not a /dev/kmsg record")

// parseKmsgRecord reads one record, as one read(2) of /dev/kmsg returns it.
func parseKmsgRecord(b []byte) (kmsgRecord, error) {
	head, rest, ok := bytes.Cut(b, []byte{';'})
	if !ok {
		return kmsgRecord{}, fmt.Errorf("%w: no ';' after the prefix", errKmsgRecord)
	}
	fields := strings.Split(string(head), ",")
	if len(fields) < 4 {
		return kmsgRecord{}, fmt.Errorf("%w: prefix %q has %d fields, want at least 4", errKmsgRecord, head, len(fields))
	}
	prio, err1 := strconv.ParseUint(fields[0], 10, 31)
	_, err2 := strconv.ParseUint(fields[1], 10, 64)
	usec, err3 := strconv.ParseUint(fields[2], 10, 63)
	if err1 != nil || err2 != nil || err3 != nil || usec > uint64(1<<63-1)/uint64(time.Microsecond) {
		return kmsgRecord{}, fmt.Errorf("%w: prefix %q: priority, sequence or timestamp out of range", errKmsgRecord, head)
	}
	msg, _, _ := bytes.Cut(rest, []byte{'\n'})
	return kmsgRecord{facility: int(prio >> 3), at: time.Duration(usec) * time.Microsecond, message: unescapeKmsg(msg)}, nil
}

// unescapeKmsg undoes /dev/kmsg's escaping: every byte below ' ', above
// '~' and every '\' is written \xNN.
func unescapeKmsg(b []byte) string {
	if !bytes.Contains(b, []byte(`\x`)) {
		return string(b)
	}
	out := make([]byte, 0, len(b))
	for i := 0; i < len(b); i++ {
		if b[i] == '\\' && i+3 < len(b) && b[i+1] == 'x' {
			if v, err := strconv.ParseUint(string(b[i+2:i+4]), 16, 8); err == nil {
				out = append(out, byte(v))
				i += 3
				continue
			}
		}
		out = append(out, b[i])
	}
	return string(out)
}

// The kernel's OOM report lines (mm/oom_kill.c, mm/memcontrol.c), each
// anchored at the start of the message: a command name, which the killed
// process chooses, can put any text into a line, but never at its start
// (the report's first line begins with the command name of the process
// that invoked the OOM killer, at most maxCommBytes).
var (
	// oomKillLine is the summary line of kernels from 5.0 on. The cgroup
	// paths are matched lazily and the command greedily up to the pid and
	// uid that end the line: a command holding ",task=" or ",pid=" cannot
	// move the cgroup.
	oomKillLine = regexp.MustCompile(`(?s)^oom-kill:constraint=[A-Z_]*,nodemask=.*?,cpuset=.*?,mems_allowed=.*?,oom_memcg=(.*?),task_memcg=(.*?),task=(.*),pid=([0-9]+),uid=([0-9]+)$`)
	// killedLine ends a report on every kernel.
	killedLine = regexp.MustCompile(`(?s)^(?:(?:Memory cgroup out of memory|Out of memory(?: \(oom_kill_allocating_task\))?): )?Killed process ([0-9]+) \((.*)\) total-vm:`)
	// legacyTaskLine names the cgroup on kernels before 5.0.
	legacyTaskLine = regexp.MustCompile(`(?s)^Task in (/.*) killed as a result of limit of (/.*)$`)
)

// invokedMarker follows the invoking command's name on a report's first
// line.
const invokedMarker = " invoked oom-killer: "

// oomReport follows the kernel log through OOM reports: a report begins
// with the "invoked oom-killer" line and ends with the line naming the
// killed process. Only the kernel's own records count.
type oomReport struct {
	open bool
	kill Kill
}

// line reads the next record and returns the kill it completes.
func (r *oomReport) line(rec kmsgRecord) (Kill, bool) {
	if rec.facility != 0 {
		return Kill{}, false // written by a process, not the kernel
	}
	msg := rec.message
	if i := strings.Index(msg, invokedMarker); i >= 0 && i <= maxCommBytes {
		r.open, r.kill = true, Kill{Source: KindKmsg, Count: 1}
		return Kill{}, false
	}
	if !r.open {
		return Kill{}, false
	}
	if m := oomKillLine.FindStringSubmatch(msg); m != nil {
		pid, err := strconv.Atoi(m[4])
		if err != nil || pid < 1 || len(m[3]) > maxCommBytes || !cleanCgroup(m[2]) {
			return Kill{}, false
		}
		r.kill.Cgroup, r.kill.Comm, r.kill.PID = m[2], m[3], pid
		return r.finish(rec.at), true
	}
	if m := killedLine.FindStringSubmatch(msg); m != nil {
		pid, err := strconv.Atoi(m[1])
		if err != nil || pid < 1 || len(m[2]) > maxCommBytes {
			return Kill{}, false
		}
		r.kill.Comm, r.kill.PID = m[2], pid
		return r.finish(rec.at), true
	}
	if m := legacyTaskLine.FindStringSubmatch(msg); m != nil && cleanCgroup(m[1]) {
		r.kill.Cgroup = m[1]
	}
	return Kill{}, false
}

// finish closes the report and returns its kill, at the time of the line
// that ended it.
func (r *oomReport) finish(at time.Duration) Kill {
	k := r.kill
	k.KernelNS = uint64(at)
	if k.Cgroup == "/" {
		k.Cgroup = ""
	}
	r.open, r.kill = false, Kill{}
	return k
}

// cleanCgroup reports whether p is an absolute, clean cgroup path.
func cleanCgroup(p string) bool {
	return strings.HasPrefix(p, "/") && path.Clean(p) == p
}
