package oom

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"
)

// A real OOM report from /dev/kmsg (a pod's container killed at its
// memory limit, kernel 6.x), one record per line.
const (
	kmsgInvoked = "4,39562,22171172306,-;kerf-workload invoked oom-killer: gfp_mask=0xcc0(GFP_KERNEL), order=0, oom_score_adj=998"
	kmsgMemcg   = "/kubepods/burstable/podec509a27-1468-4ea2-8df6-438c6489dbeb/b373702d89e470f0adecc6771d0aa4ce6e2a11f17db5170baad2e87990b53fdf"
	kmsgOOMKill = "6,39640,22171172527,-;oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=b373702d89e470f0adecc6771d0aa4ce6e2a11f17db5170baad2e87990b53fdf,mems_allowed=0,oom_memcg=/kubepods/burstable/podec509a27-1468-4ea2-8df6-438c6489dbeb,task_memcg=" + kmsgMemcg + ",task=kerf-workload,pid=31097,uid=65532"
	kmsgKilled  = "3,39641,22171172601,-;Memory cgroup out of memory: Killed process 31097 (kerf-workload) total-vm:1330684kB, anon-rss:96768kB, file-rss:5240kB, shmem-rss:0kB, UID:65532 pgtables:296kB oom_score_adj:998"
	// kmsgLegacy is the cgroup line of kernels before 5.0.
	kmsgLegacy = "6,812,5123456789,-;Task in /kubepods/burstable/pod1/abc killed as a result of limit of /kubepods/burstable/pod1"
)

// escapeKmsg escapes a message as /dev/kmsg does.
func escapeKmsg(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < ' ' || c >= 127 || c == '\\' {
			fmt.Fprintf(&b, `\x%02x`, c)
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}

// parseReport reads records, one per NUL-separated chunk as one read(2)
// each, through an oomReport, checking each kill it gives.
func parseReport(t *testing.T, data []byte) []Kill {
	var r oomReport
	var kills []Kill
	started := false
	for _, b := range bytes.Split(data, []byte{0}) {
		rec, err := parseKmsgRecord(b)
		if err != nil {
			continue
		}
		if rec.at < 0 {
			t.Fatalf("%q: negative timestamp %v", b, rec.at)
		}
		k, ok := r.line(rec)
		if rec.facility == 0 && strings.Contains(rec.message, invokedMarker) {
			started = true
		}
		if !ok {
			continue
		}
		switch {
		case rec.facility != 0:
			t.Fatalf("%q: a record of facility %d ended a report", b, rec.facility)
		case !started:
			t.Fatalf("%q: a kill without a report", b)
		case k.PID < 1 || len(k.Comm) > maxCommBytes || k.Count != 1 || k.Source != KindKmsg:
			t.Fatalf("%q: kill %+v", b, k)
		case k.Cgroup != "" && !cleanCgroup(k.Cgroup):
			t.Fatalf("%q: cgroup %q is not a clean absolute path", b, k.Cgroup)
		case k.KernelNS != uint64(rec.at):
			t.Fatalf("%q: kill at %d, record at %v", b, k.KernelNS, rec.at)
		}
		kills = append(kills, k)
	}
	return kills
}

// FuzzKmsgRecords feeds the kernel log parser raw records: no panic, and
// every kill it gives comes from a report of the kernel's own records,
// with a pid, a command name the kernel could hold and a clean cgroup.
func FuzzKmsgRecords(f *testing.F) {
	join := func(lines ...string) []byte { return []byte(strings.Join(lines, "\x00")) }
	f.Add(join(kmsgInvoked, kmsgOOMKill, kmsgKilled))
	f.Add(join(kmsgInvoked, kmsgKilled))
	f.Add(join(kmsgInvoked, kmsgLegacy, kmsgKilled))
	f.Add(join(kmsgInvoked, "6,1,2,-,caller=T1;"+kmsgOOMKill[22:]+"\n SUBSYSTEM=x"))
	// A process wrote the report to /dev/kmsg: facility user.
	f.Add(join("12,1,2,-;"+kmsgInvoked[22:], "14,2,3,-;"+kmsgOOMKill[22:]))
	// Another kernel line quoting a name the process chose.
	f.Add(join("6,1,2,-;a[1]: segfault at 0 ip 0 sp 0 error 4 in x invoked oom-killer: [400000+1000]", "6,2,3,-;"+kmsgKilled[22:]))
	f.Add(join(kmsgInvoked, `6,2,3,-;oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,mems_allowed=0,oom_memcg=/a,task_memcg=/a/b,task=/..\x2ctask=x,pid=7,uid=0`))
	f.Add([]byte("4,1,18446744073709551615,-;x"))
	f.Fuzz(func(t *testing.T, data []byte) {
		parseReport(t, data)
	})
}

// FuzzKmsgCommCannotMoveTheKill builds the kernel's report of a kill in a
// pod's container whose process chose its own command name (any 15 bytes:
// prctl(PR_SET_NAME) or /proc/self/comm) and checks that the kill is read
// with that name, its pid and the container's cgroup, whatever the name.
func FuzzKmsgCommCannotMoveTheKill(f *testing.F) {
	for _, s := range []string{"kerf-workload", "/..,task=x", ",task=/../../x", "a,pid=1,uid=0", "x) total-vm:1", " invoked oom-k", `\x41`, "a\nb", ""} {
		f.Add(s, uint32(31097))
	}
	f.Fuzz(func(t *testing.T, comm string, pid uint32) {
		if len(comm) > maxCommBytes || pid == 0 || pid > 1<<22 {
			return // the kernel has no such name or pid
		}
		oomKill := fmt.Sprintf("oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=x,mems_allowed=0,oom_memcg=/kubepods/burstable/pod1,task_memcg=%s,task=%s,pid=%d,uid=65532",
			kmsgMemcg, escapeKmsg(comm), pid)
		killed := fmt.Sprintf("Memory cgroup out of memory: Killed process %d (%s) total-vm:1330684kB, anon-rss:96768kB", pid, escapeKmsg(comm))
		invoked := escapeKmsg(comm) + " invoked oom-killer: gfp_mask=0xcc0(GFP_KERNEL), order=0, oom_score_adj=998"
		for _, lines := range [][]string{{invoked, oomKill, killed}, {invoked, killed}} {
			var data []string
			for i, l := range lines {
				data = append(data, fmt.Sprintf("6,%d,%d,-;%s", i+1, 1000+i, l))
			}
			kills := parseReport(t, []byte(strings.Join(data, "\x00")))
			if len(kills) != 1 {
				t.Fatalf("comm %q: %d kills from %q", comm, len(kills), data)
			}
			k := kills[0]
			if k.PID != int(pid) || k.Comm != comm {
				t.Fatalf("comm %q pid %d read as %q %d", comm, pid, k.Comm, k.PID)
			}
			if len(lines) == 3 && k.Cgroup != kmsgMemcg {
				t.Fatalf("comm %q moved the kill to cgroup %q", comm, k.Cgroup)
			}
			if k.KernelNS != uint64(1001*time.Microsecond) {
				t.Fatalf("kill at %d", k.KernelNS)
			}
		}
	})
}
