package cgroup

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const (
	cpuStatV2 = "usage_usec 5316541\nuser_usec 3780339\nsystem_usec 1536202\ncore_sched.force_idle_usec 0\n" +
		"nr_periods 4210\nnr_throttled 987\nthrottled_usec 45612345\nnr_bursts 0\nburst_usec 0\n"
	cpuStatV1     = "nr_periods 1500\nnr_throttled 750\nthrottled_time 2500000000\nnr_bursts 0\nburst_time 0\n"
	memoryEvents  = "low 0\nhigh 0\nmax 17\noom 3\noom_kill 2\noom_group_kill 1\n"
	oomControlV1  = "oom_kill_disable 0\nunder_oom 1\noom_kill 5\n"
	maxUint64Text = "18446744073709551615"
)

// parseCase is an input to a parser into T and what it must give: want,
// or, when wantInErr is set, an ErrMalformed error that contains wantInErr.
type parseCase[T any] struct {
	name, in  string
	want      T
	wantInErr string
}

// testParse runs each case through parse into a destination that starts as
// start, which a failed parse must leave alone.
func testParse[T any](t *testing.T, parse func([]byte, *T) error, start T, cases []parseCase[T]) {
	t.Helper()
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			got := start
			err := parse([]byte(tt.in), &got)
			if tt.wantInErr != "" {
				require.Error(t, err)
				assert.ErrorIs(t, err, ErrMalformed)
				assert.Contains(t, err.Error(), tt.wantInErr)
				assert.Equal(t, start, got, "a failed parse leaves the destination alone")
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
		})
	}
}

func TestParseCPUStatReadsBothVersions(t *testing.T) {
	tests := []struct {
		name, in string
		want     CPUStat
	}{
		{"v2", cpuStatV2, CPUStat{Periods: 4210, Throttled: 987, ThrottledTime: 45612345 * time.Microsecond, Usage: 5316541 * time.Microsecond}},
		{"v1", cpuStatV1, CPUStat{Periods: 1500, Throttled: 750, ThrottledTime: 2500 * time.Millisecond}},
		{"v1 minimal, old kernel without bursts", "nr_periods 1\nnr_throttled 0\nthrottled_time 0\n", CPUStat{Periods: 1}},
		{"keys in any order", "throttled_usec 1\nnr_throttled 2\nnr_periods 3\n", CPUStat{Periods: 3, Throttled: 2, ThrottledTime: time.Microsecond}},
		{"unknown keys ignored, even non-numeric", "nr_periods 1\nfuture_key x y\nnr_throttled 1\nthrottled_usec 1\n", CPUStat{Periods: 1, Throttled: 1, ThrottledTime: time.Microsecond}},
		{"empty lines skipped", "\nnr_periods 1\n\nnr_throttled 1\nthrottled_usec 1\n", CPUStat{Periods: 1, Throttled: 1, ThrottledTime: time.Microsecond}},
		{"max counters", "nr_periods " + maxUint64Text + "\nnr_throttled " + maxUint64Text + "\nthrottled_time 9223372036854775807\n",
			CPUStat{Periods: 1<<64 - 1, Throttled: 1<<64 - 1, ThrottledTime: 1<<63 - 1}},
		{"max usec", "nr_periods 0\nnr_throttled 0\nthrottled_usec 9223372036854775\n", CPUStat{ThrottledTime: 9223372036854775 * time.Microsecond}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var s CPUStat
			require.NoError(t, ParseCPUStat([]byte(tt.in), &s))
			assert.Equal(t, tt.want, s)
		})
	}
}

func TestCPUStatNormalisesV1ThrottledTime(t *testing.T) {
	var v1, v2 CPUStat
	require.NoError(t, ParseCPUStat([]byte("nr_periods 10\nnr_throttled 5\nthrottled_time 1500000\n"), &v1))
	require.NoError(t, ParseCPUStat([]byte("nr_periods 10\nnr_throttled 5\nthrottled_usec 1500\n"), &v2))
	assert.Equal(t, v1, v2)
	assert.Equal(t, 1500*time.Microsecond, v1.ThrottledTime)
}

func TestParseCPUStatRejectsMalformedContent(t *testing.T) {
	testParse(t, ParseCPUStat, CPUStat{Periods: 42}, []parseCase[CPUStat]{
		{name: "empty", in: "", wantInErr: "missing key nr_periods"},
		{name: "missing nr_throttled", in: "nr_periods 1\nthrottled_usec 1\n", wantInErr: "missing key nr_throttled"},
		{name: "missing throttled time", in: "nr_periods 1\nnr_throttled 1\n", wantInErr: "missing key throttled_usec"},
		{name: "v2 cpu.stat without the cpu controller", in: "usage_usec 1\nuser_usec 1\nsystem_usec 0\n", wantInErr: "missing key nr_periods"},
		{name: "both versions' keys", in: "nr_periods 1\nnr_throttled 1\nthrottled_usec 1\nthrottled_time 1\n", wantInErr: "both"},
		{name: "non-numeric value", in: "nr_periods abc\nnr_throttled 1\nthrottled_usec 1\n", wantInErr: `line 1: nr_periods "abc": not a decimal integer`},
		{name: "negative value", in: "nr_periods 1\nnr_throttled -1\nthrottled_usec 1\n", wantInErr: "line 2: nr_throttled"},
		{name: "plus sign", in: "nr_periods +1\nnr_throttled 1\nthrottled_usec 1\n", wantInErr: "not a decimal integer"},
		{name: "two spaces", in: "nr_periods  1\nnr_throttled 1\nthrottled_usec 1\n", wantInErr: "not a decimal integer"},
		{name: "trailing space", in: "nr_periods 1 \nnr_throttled 1\nthrottled_usec 1\n", wantInErr: "not a decimal integer"},
		{name: "carriage return", in: "nr_periods 1\r\nnr_throttled 1\nthrottled_usec 1\n", wantInErr: "not a decimal integer"},
		{name: "key without value", in: "nr_periods\nnr_throttled 1\nthrottled_usec 1\n", wantInErr: `line 1: "nr_periods": want "key value"`},
		{name: "key with empty value", in: "nr_periods \nnr_throttled 1\nthrottled_usec 1\n", wantInErr: "want \"key value\""},
		{name: "line starting with space", in: " 1\n", wantInErr: "want \"key value\""},
		{name: "truncated last line", in: "nr_periods 1\nnr_throttled 1\nthrottled_usec 1", wantInErr: "line 3: truncated"},
		{name: "truncated mid key", in: "nr_periods 1\nnr_thr", wantInErr: "truncated"},
		{name: "uint64 overflow", in: "nr_periods 18446744073709551616\nnr_throttled 1\nthrottled_usec 1\n", wantInErr: "overflows uint64"},
		{name: "huge number", in: "nr_periods 1\nnr_throttled 99999999999999999999999999\nthrottled_usec 1\n", wantInErr: "overflows uint64"},
		{name: "usec overflows duration", in: "nr_periods 1\nnr_throttled 1\nthrottled_usec 9223372036854776\n", wantInErr: "overflows a duration"},
		{name: "ns overflows duration", in: "nr_periods 1\nnr_throttled 1\nthrottled_time 9223372036854775808\n", wantInErr: "overflows a duration"},
		{name: "repeated key", in: "nr_periods 1\nnr_periods 2\nnr_throttled 1\nthrottled_usec 1\n", wantInErr: "line 2: nr_periods \"2\": repeated key"},
		{name: "repeated usage_usec", in: "usage_usec 1\nusage_usec 2\nnr_periods 1\nnr_throttled 1\nthrottled_usec 1\n", wantInErr: "line 2: usage_usec \"2\": repeated key"},
		{name: "usage_usec overflows duration", in: "usage_usec 9223372036854776\nnr_periods 1\nnr_throttled 1\nthrottled_usec 1\n", wantInErr: "line 1: usage_usec \"9223372036854776\": value overflows a duration"},
	})
}

func TestParseMemoryEvents(t *testing.T) {
	testParse(t, ParseMemoryEvents, MemoryEvents{OOM: 42}, []parseCase[MemoryEvents]{
		{name: "full", in: memoryEvents, want: MemoryEvents{OOM: 3, OOMKill: 2, OOMGroupKill: 1}},
		{name: "old kernel without oom_group_kill", in: "low 0\nhigh 0\nmax 0\noom 1\noom_kill 1\n", want: MemoryEvents{OOM: 1, OOMKill: 1}},
		{name: "unknown keys ignored", in: "oom 0\nsock_throttled 4\noom_kill 0\n"},
		{name: "missing oom_kill", in: "low 0\nhigh 0\nmax 0\noom 1\n", wantInErr: "missing key oom_kill"},
		{name: "missing oom", in: "oom_kill 1\n", wantInErr: "missing key oom"},
		{name: "non-numeric", in: "oom 0\noom_kill one\n", wantInErr: `line 2: oom_kill "one"`},
		{name: "overflow", in: "oom 0\noom_kill 18446744073709551616\n", wantInErr: "overflow"},
		{name: "repeated", in: "oom 0\noom_kill 1\noom_kill 2\n", wantInErr: "repeated key"},
		{name: "truncated", in: "oom 0\noom_kill 1", wantInErr: "truncated"},
	})
}

func TestParseOOMControl(t *testing.T) {
	testParse(t, ParseOOMControl, OOMControl{OOMKill: 42}, []parseCase[OOMControl]{
		{name: "under oom", in: oomControlV1, want: OOMControl{UnderOOM: true, OOMKill: 5}},
		{name: "kill disabled", in: "oom_kill_disable 1\nunder_oom 0\noom_kill 0\n", want: OOMControl{KillDisabled: true}},
		{name: "unknown keys ignored", in: "oom_kill_disable 0\nunder_oom 0\noom_kill 2\nnew_key 7\n", want: OOMControl{OOMKill: 2}},
		{name: "kernel before 4.13 lacks oom_kill", in: "oom_kill_disable 0\nunder_oom 0\n", wantInErr: "missing key oom_kill"},
		{name: "missing under_oom", in: "oom_kill_disable 0\noom_kill 0\n", wantInErr: "missing key under_oom"},
		{name: "missing oom_kill_disable", in: "under_oom 0\noom_kill 0\n", wantInErr: "missing key oom_kill_disable"},
		{name: "non-numeric", in: "oom_kill_disable no\nunder_oom 0\noom_kill 0\n", wantInErr: `line 1: oom_kill_disable "no"`},
		{name: "truncated", in: "oom_kill_disable 0\nunder_oom 0\noom_kill 1", wantInErr: "truncated"},
	})
}

func TestParseErrorsShortenLongValues(t *testing.T) {
	err := ParseCPUStat([]byte("nr_periods "+strings.Repeat("x", 10000)+"\n"), new(CPUStat))
	require.Error(t, err)
	assert.Less(t, len(err.Error()), 200)
}

func TestParsersDoNotAllocate(t *testing.T) {
	cpuV1, cpuV2, mem, oom := []byte(cpuStatV1), []byte(cpuStatV2), []byte(memoryEvents), []byte(oomControlV1)
	var s CPUStat
	var e MemoryEvents
	var c OOMControl
	allocs := testing.AllocsPerRun(100, func() {
		_ = ParseCPUStat(cpuV1, &s)
		_ = ParseCPUStat(cpuV2, &s)
		_ = ParseMemoryEvents(mem, &e)
		_ = ParseOOMControl(oom, &c)
	})
	assert.Zero(t, allocs)
}

// memoryStatV1 is this development VM's root /sys/fs/cgroup/memory/memory.stat
// (Linux 6.18, cgroup v1): the cgroup's own counters, then total_* ones that
// include its descendants.
const memoryStatV1 = `cache 17252352
rss 11403264
rss_huge 0
shmem 9084928
mapped_file 7626752
dirty 557056
writeback 0
workingset_refault_anon 0
workingset_refault_file 899
swap 0
swapcached 0
pgpgin 39104
pgpgout 32146
pgfault 45259
pgmajfault 0
inactive_anon 0
active_anon 1531904
inactive_file 1413120
active_file 6754304
unevictable 18948096
hierarchical_memory_limit 9223372036854771712
hierarchical_memsw_limit 9223372036854771712
total_cache 3808702464
total_rss 214925312
total_rss_huge 0
total_shmem 9084928
total_mapped_file 52953088
total_dirty 773971968
total_writeback 0
total_workingset_refault_anon 0
total_workingset_refault_file 11197
total_swap 0
total_swapcached 0
total_pgpgin 17158942
total_pgpgout 16657590
total_pgfault 18692019
total_pgmajfault 740
total_inactive_anon 203337728
total_active_anon 1626112
total_inactive_file 2066391040
total_active_file 1733230592
total_unevictable 18948096
`

// memoryStatV2 is a cgroup v2 memory.stat in Linux 6.18's format (key order
// of mm/memcontrol.c memory_stats[] and memcg_vm_event_stat[], with swap,
// zswap and THP configured), the same as the unified-systemd-containerd
// fixture's Guaranteed container.
const memoryStatV2 = `anon 964689920
file 106954752
kernel 2097152
kernel_stack 163840
pagetables 425984
sec_pagetables 0
percpu 11520
sock 0
vmalloc 0
shmem 0
zswap 0
zswapped 0
file_mapped 1048576
file_dirty 8192
file_writeback 0
swapcached 0
anon_thp 0
file_thp 0
shmem_thp 0
inactive_anon 964689920
active_anon 65536
inactive_file 104857600
active_file 2097152
unevictable 0
slab_reclaimable 612344
slab_unreclaimable 533120
slab 1145464
workingset_refault_anon 0
workingset_refault_file 7
workingset_activate_anon 0
workingset_activate_file 0
workingset_restore_anon 0
workingset_restore_file 0
workingset_nodereclaim 0
pgdemote_kswapd 0
pgdemote_direct 0
pgdemote_khugepaged 0
pgdemote_proactive 0
pgscan 0
pgsteal 0
pswpin 0
pswpout 0
pgscan_kswapd 0
pgscan_direct 0
pgscan_khugepaged 0
pgscan_proactive 0
pgsteal_kswapd 0
pgsteal_direct 0
pgsteal_khugepaged 0
pgsteal_proactive 0
pgfault 184362
pgmajfault 11
pgrefill 0
pgactivate 512
pgdeactivate 0
pglazyfree 0
pglazyfreed 0
swpin_zero 0
swpout_zero 0
zswpin 0
zswpout 0
zswpwb 0
thp_fault_alloc 0
thp_collapse_alloc 0
thp_swpout 0
thp_swpout_fallback 0
`

func TestParseCPUStatUsageNeedsOnlyUsage(t *testing.T) {
	testParse(t, ParseCPUStatUsage, time.Duration(42), []parseCase[time.Duration]{
		{name: "full v2", in: cpuStatV2, want: 5316541 * time.Microsecond},
		{name: "cpu controller not enabled: no CFS counters", in: "usage_usec 7\nuser_usec 5\nsystem_usec 2\n", want: 7 * time.Microsecond},
		{name: "max", in: "usage_usec 9223372036854775\n", want: 9223372036854775 * time.Microsecond},
		{name: "v1 cpu.stat has no usage", in: cpuStatV1, wantInErr: "missing key usage_usec"},
		{name: "empty", in: "", wantInErr: "missing key usage_usec"},
		{name: "repeated", in: "usage_usec 1\nusage_usec 1\n", wantInErr: `line 2: usage_usec "1": repeated key`},
		{name: "overflows a duration", in: "usage_usec 9223372036854776\n", wantInErr: "overflows a duration"},
		{name: "overflows uint64", in: "usage_usec 18446744073709551616\n", wantInErr: "overflows uint64"},
		{name: "non-numeric", in: "usage_usec 1e6\n", wantInErr: `line 1: usage_usec "1e6": not a decimal integer`},
		{name: "a known key malformed", in: "usage_usec 1\nnr_periods x\n", wantInErr: `line 2: nr_periods "x"`},
		{name: "truncated", in: "usage_usec 12", wantInErr: "truncated"},
	})
}

func TestParseValueReadsOneNumberAndANewline(t *testing.T) {
	testParse(t, ParseValue, uint64(42), []parseCase[uint64]{
		{name: "memory.current", in: "268435456\n", want: 268435456},
		{name: "zero", in: "0\n", want: 0},
		{name: "max uint64", in: maxUint64Text + "\n", want: 1<<64 - 1},
		{name: "empty", in: "", wantInErr: "empty"},
		{name: "only a newline", in: "\n", wantInErr: "empty value"},
		{name: "no newline", in: "4096", wantInErr: `truncated: no newline at end of "4096"`},
		{name: "overflow", in: "18446744073709551616\n", wantInErr: `value "18446744073709551616": overflows uint64`},
		{name: "memory.max's max is not a value here", in: "max\n", wantInErr: `value "max": not a decimal integer`},
		{name: "negative", in: "-1\n", wantInErr: "not a decimal integer"},
		{name: "two lines", in: "1\n2\n", wantInErr: "not a decimal integer"},
		{name: "trailing space", in: "1 \n", wantInErr: "not a decimal integer"},
		{name: "carriage return", in: "1\r\n", wantInErr: "not a decimal integer"},
	})
}

func TestParseCPUAcctUsageIsNanoseconds(t *testing.T) {
	var d time.Duration
	require.NoError(t, ParseCPUAcctUsage([]byte("31415926535\n"), &d))
	assert.Equal(t, 31415926535*time.Nanosecond, d)
	require.NoError(t, ParseCPUAcctUsage([]byte("9223372036854775807\n"), &d))
	assert.Equal(t, time.Duration(1<<63-1), d)

	d = 42
	err := ParseCPUAcctUsage([]byte("9223372036854775808\n"), &d)
	assert.ErrorIs(t, err, ErrMalformed)
	assert.Contains(t, err.Error(), "overflows a duration")
	err = ParseCPUAcctUsage([]byte("12 34\n"), &d)
	assert.ErrorIs(t, err, ErrMalformed)
	assert.Equal(t, time.Duration(42), d)
}

func TestParseMemoryStatTakesTheHierarchicalInactiveFile(t *testing.T) {
	start := MemoryStat{InactiveFile: 42}
	t.Run("v1", func(t *testing.T) {
		testParse(t, ParseMemoryStatV1, start, []parseCase[MemoryStat]{
			{name: "total_inactive_file, not the cgroup's own inactive_file", in: memoryStatV1, want: MemoryStat{InactiveFile: 2066391040}},
			{name: "minimal", in: "total_inactive_file 1\n", want: MemoryStat{InactiveFile: 1}},
			{name: "v2 file read as v1", in: memoryStatV2, wantInErr: "missing key total_inactive_file"},
			{name: "missing key", in: "cache 1\ninactive_file 1\n", wantInErr: "missing key total_inactive_file"},
			{name: "repeated key", in: "total_inactive_file 1\ntotal_inactive_file 2\n", wantInErr: `line 2: total_inactive_file "2": repeated key`},
			{name: "non-numeric", in: "total_inactive_file 1k\n", wantInErr: `line 1: total_inactive_file "1k": not a decimal integer`},
		})
	})
	t.Run("v2", func(t *testing.T) {
		testParse(t, ParseMemoryStatV2, start, []parseCase[MemoryStat]{
			{name: "a full file", in: memoryStatV2, want: MemoryStat{InactiveFile: 104857600}},
			{name: "minimal", in: "inactive_file 0\n"},
			{name: "max", in: "inactive_file " + maxUint64Text + "\n", want: MemoryStat{InactiveFile: 1<<64 - 1}},
			{name: "v1 file read as v2 takes its local inactive_file", in: memoryStatV1, want: MemoryStat{InactiveFile: 1413120}},
			{name: "missing key", in: "anon 1\nfile 1\n", wantInErr: "missing key inactive_file"},
			{name: "empty", in: "", wantInErr: "missing key inactive_file"},
			{name: "repeated key", in: "inactive_file 1\nactive_file 1\ninactive_file 1\n", wantInErr: `line 3: inactive_file "1": repeated key`},
			{name: "overflow", in: "inactive_file 18446744073709551616\n", wantInErr: "overflows uint64"},
			{name: "truncated", in: "anon 1\ninactive_file 12", wantInErr: "line 2: truncated"},
			{name: "malformed line", in: "inactive_file 1\nanon\n", wantInErr: `line 2: "anon": want "key value"`},
			{name: "unknown keys ignored, even non-numeric", in: "future x y\ninactive_file 5\n", want: MemoryStat{InactiveFile: 5}},
		})
	})
}

func TestRealMemoryStatFilesHaveTheirFullKeySet(t *testing.T) {
	assert.Equal(t, 42, strings.Count(memoryStatV1, "\n"))
	assert.Equal(t, 66, strings.Count(memoryStatV2, "\n"))
}

func TestWorkingSetIsUsageLessInactiveFileClampedAtZero(t *testing.T) {
	tests := []struct {
		name                string
		usage, inactive, ws uint64
	}{
		{"cadvisor's rule", 268435456, 41943040, 226492416},
		{"no inactive cache", 100, 0, 100},
		{"all of it inactive cache", 4096, 4096, 0},
		{"inactive_file read after a drop in usage", 50331648, 52428800, 0},
		{"max", 1<<64 - 1, 1, 1<<64 - 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.ws, WorkingSet(tt.usage, tt.inactive))
		})
	}
}

func TestIntervalPeakUsesTheKernelPeakOnlyWhenItGrew(t *testing.T) {
	const mi = 1 << 20
	tests := []struct {
		name       string
		prev, cur  Usage
		sampledMax uint64
		want       uint64
	}{
		{"first report: the peak since creation", Usage{}, Usage{Memory: 10 * mi, Peak: 300 * mi, PeakAvailable: true}, 20 * mi, 300 * mi},
		{"peak grew within the interval", Usage{Peak: 300 * mi, PeakAvailable: true}, Usage{Memory: 10 * mi, Peak: 310 * mi, PeakAvailable: true}, 200 * mi, 310 * mi},
		{"peak reached before: the samples", Usage{Peak: 300 * mi, PeakAvailable: true}, Usage{Memory: 10 * mi, Peak: 300 * mi, PeakAvailable: true}, 120 * mi, 120 * mi},
		{"peak reached before, usage above the samples", Usage{Peak: 300 * mi, PeakAvailable: true}, Usage{Memory: 150 * mi, Peak: 300 * mi, PeakAvailable: true}, 120 * mi, 150 * mi},
		{"no peak file (v2 before 5.19)", Usage{Memory: 80 * mi}, Usage{Memory: 90 * mi}, 100 * mi, 100 * mi},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, IntervalPeak(tt.prev, tt.cur, tt.sampledMax))
		})
	}
}

func TestUsageParsersDoNotAllocate(t *testing.T) {
	v1, v2, cpu, val := []byte(memoryStatV1), []byte(memoryStatV2), []byte(cpuStatV2), []byte("31415926535\n")
	var s MemoryStat
	var d time.Duration
	var v uint64
	allocs := testing.AllocsPerRun(100, func() {
		_ = ParseMemoryStatV1(v1, &s)
		_ = ParseMemoryStatV2(v2, &s)
		_ = ParseCPUStatUsage(cpu, &d)
		_ = ParseCPUAcctUsage(val, &d)
		_ = ParseValue(val, &v)
	})
	assert.Zero(t, allocs)
}
