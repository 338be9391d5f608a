package cgroup

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"
)

// checkParse holds what every parser promises: no panic, and either a
// result or an ErrMalformed error that leaves the destination alone.
func checkParse[T comparable](t *testing.T, parse func([]byte, *T) error, data []byte) {
	var sentinel T
	got := sentinel
	err := parse(data, &got)
	if err != nil {
		if !errors.Is(err, ErrMalformed) {
			t.Fatalf("error %v does not match ErrMalformed", err)
		}
		if got != sentinel {
			t.Fatalf("failed parse changed the destination to %+v", got)
		}
	}
}

func FuzzParseCPUStat(f *testing.F) {
	for _, s := range []string{cpuStatV1, cpuStatV2, "", "nr_periods 1\n", "nr_periods 18446744073709551616\n", "nr_periods 1\nnr_throttled 1\nthrottled_usec 9223372036854776\n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		checkParse(t, ParseCPUStat, data)
		var s CPUStat
		if ParseCPUStat(data, &s) == nil && s.ThrottledTime < 0 {
			t.Fatalf("negative throttled time %v", s.ThrottledTime)
		}
	})
}

func FuzzParseMemoryEvents(f *testing.F) {
	for _, s := range []string{memoryEvents, "oom 1\noom_kill 1\n", "oom 1\n", "oom x\n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		checkParse(t, ParseMemoryEvents, data)
	})
}

func FuzzParseOOMControl(f *testing.F) {
	for _, s := range []string{oomControlV1, "oom_kill_disable 1\nunder_oom 1\noom_kill 1", "under_oom\n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		checkParse(t, ParseOOMControl, data)
	})
}

func FuzzParseCPUStatUsage(f *testing.F) {
	for _, s := range []string{cpuStatV2, cpuStatV1, "usage_usec 1\n", "usage_usec 9223372036854776\n", "usage_usec 1\nusage_usec 1\n", "usage_usec 1"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		checkParse(t, ParseCPUStatUsage, data)
		var d time.Duration
		if ParseCPUStatUsage(data, &d) == nil && d < 0 {
			t.Fatalf("negative usage %v", d)
		}
		// cpu.stat's two parsers agree on usage_usec.
		var s CPUStat
		if ParseCPUStat(data, &s) == nil && s.Usage != d {
			t.Fatalf("ParseCPUStat read usage %v, ParseCPUStatUsage %v", s.Usage, d)
		}
	})
}

func FuzzParseValue(f *testing.F) {
	for _, s := range []string{"0\n", "268435456\n", maxUint64Text + "\n", "18446744073709551616\n", "", "\n", "12", "max\n", "1\n2\n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		checkParse(t, ParseValue, data)
		var v uint64
		if ParseValue(data, &v) == nil {
			if got := strconv.FormatUint(v, 10) + "\n"; strings.TrimLeft(string(data), "0") != strings.TrimLeft(got, "0") {
				t.Fatalf("%q parsed to %d", data, v)
			}
		}
	})
}

func FuzzParseCPUAcctUsage(f *testing.F) {
	for _, s := range []string{"31415926535\n", "9223372036854775807\n", "9223372036854775808\n", "0\n", "1 2\n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		checkParse(t, ParseCPUAcctUsage, data)
		var d time.Duration
		if ParseCPUAcctUsage(data, &d) == nil && d < 0 {
			t.Fatalf("negative usage %v", d)
		}
	})
}

// fuzzMemoryStat checks a memory.stat parser and the working set made from
// its result: never above the usage.
func fuzzMemoryStat(t *testing.T, parse func([]byte, *MemoryStat) error, data []byte, usage uint64) {
	checkParse(t, parse, data)
	var s MemoryStat
	if parse(data, &s) == nil {
		if ws := WorkingSet(usage, s.InactiveFile); ws > usage || (s.InactiveFile <= usage && ws+s.InactiveFile != usage) {
			t.Fatalf("working set %d from usage %d and inactive file %d", ws, usage, s.InactiveFile)
		}
	}
}

func FuzzParseMemoryStatV1(f *testing.F) {
	for _, s := range []string{memoryStatV1, memoryStatV2, "total_inactive_file 1\n", "total_inactive_file 1\ntotal_inactive_file 1\n", "inactive_file 1\n", "total_inactive_file 18446744073709551616\n"} {
		f.Add([]byte(s), uint64(1<<30))
	}
	f.Fuzz(func(t *testing.T, data []byte, usage uint64) {
		fuzzMemoryStat(t, ParseMemoryStatV1, data, usage)
	})
}

func FuzzParseMemoryStatV2(f *testing.F) {
	for _, s := range []string{memoryStatV2, memoryStatV1, "inactive_file 1\n", "inactive_file 1\ninactive_file 1\n", "anon 1\n", "inactive_file 1"} {
		f.Add([]byte(s), uint64(1<<30))
	}
	f.Fuzz(func(t *testing.T, data []byte, usage uint64) {
		fuzzMemoryStat(t, ParseMemoryStatV2, data, usage)
	})
}

func FuzzParseMountinfoLine(f *testing.F) {
	for _, s := range []string{
		"27 25 0:27 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid shared:11 - cgroup cgroup rw,cpu,cpuacct",
		"41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw",
		`31 1 0:45 /a\134b /var/my\040cache rw - tmpfs tmpfs rw`,
		"1 2 3 4 5 6 - 7 8 9",
		`1 2 3:4 / /\3 rw - x y z`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		e, err := parseMountinfoLine(line)
		if err != nil {
			return
		}
		if !strings.HasPrefix(e.mountPoint, "/") || !strings.HasPrefix(e.root, "/") {
			t.Fatalf("accepted a relative path: %+v", e)
		}
		if e.fsType == "cgroup" {
			for _, c := range v1Controllers(e.superOptions) {
				if c == "" || strings.Contains(c, ",") {
					t.Fatalf("bad controller %q from %q", c, e.superOptions)
				}
			}
		}
	})
}

func FuzzParseContainerPath(f *testing.F) {
	for _, s := range []string{
		"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + testUID_ + ".slice/cri-containerd-" + testID + ".scope",
		"/kubepods/pod" + testUID + "/crio-" + testID,
		"/kubepods/besteffort/pod" + staticUID + "/" + testID + "/x",
		"/system.slice/containerd.service",
		"kubepods-pod.slice/x.scope",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		uid, id, ok := ParseContainerPath(p)
		if !ok {
			if uid != "" || id != "" {
				t.Fatalf("not ok but returned %q %q", uid, id)
			}
			return
		}
		if !validUID(uid) || !validContainerID(id) {
			t.Fatalf("ok with malformed uid %q or id %q", uid, id)
		}
	})
}

func FuzzParseContainerID(f *testing.F) {
	for _, s := range []string{"containerd://" + testID, "cri-o://abc", "docker://", "rkt://x", "containerd://a://b", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		runtime, id, err := ParseContainerID(s)
		if err != nil {
			return
		}
		if string(runtime)+"://"+id != s {
			t.Fatalf("%q parsed to %q %q", s, runtime, id)
		}
		if !validContainerID(id) {
			t.Fatalf("%q: accepted id %q", s, id)
		}
	})
}

// FuzzContainerDirRoundTrip checks that every cgroup path ContainerDir makes
// parses back to the same pod and container.
func FuzzContainerDirRoundTrip(f *testing.F) {
	f.Add(testUID, "containerd://"+testID, "/", uint8(0))
	f.Add(staticUID, "cri-o://abc", "/k8s-a/b", uint8(5))
	f.Add(testUID, "docker://"+testID, "/kubepods", uint8(3))
	f.Fuzz(func(t *testing.T, uid, containerID, root string, choice uint8) {
		layout := Layout{Driver: DriverSystemd, Root: root}
		if choice&1 == 1 {
			layout.Driver = DriverCgroupfs
		}
		pod := PodCgroup{UID: uid, QoS: []QoSClass{QoSGuaranteed, QoSBurstable, QoSBestEffort}[int(choice>>1)%3]}
		dir, err := layout.ContainerDir(pod, containerID)
		if err != nil {
			return
		}
		gotUID, gotID, ok := ParseContainerPath(dir)
		_, wantID, _ := ParseContainerID(containerID)
		if !ok || gotUID != uid || gotID != wantID {
			t.Fatalf("%s parsed to %q %q %v, want %q %q", dir, gotUID, gotID, ok, uid, wantID)
		}
	})
}
