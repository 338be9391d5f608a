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

func TestParseCPUStatReadsBothVersions(t *testing.T) {
	tests := []struct {
		name, in string
		want     CPUStat
	}{
		{"v2", cpuStatV2, CPUStat{Periods: 4210, Throttled: 987, ThrottledTime: 45612345 * time.Microsecond}},
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
	tests := []struct {
		name, in  string
		wantInErr string
	}{
		{"empty", "", "missing key nr_periods"},
		{"missing nr_throttled", "nr_periods 1\nthrottled_usec 1\n", "missing key nr_throttled"},
		{"missing throttled time", "nr_periods 1\nnr_throttled 1\n", "missing key throttled_usec"},
		{"v2 cpu.stat without the cpu controller", "usage_usec 1\nuser_usec 1\nsystem_usec 0\n", "missing key nr_periods"},
		{"both versions' keys", "nr_periods 1\nnr_throttled 1\nthrottled_usec 1\nthrottled_time 1\n", "both"},
		{"non-numeric value", "nr_periods abc\nnr_throttled 1\nthrottled_usec 1\n", `line 1: nr_periods "abc": not a decimal integer`},
		{"negative value", "nr_periods 1\nnr_throttled -1\nthrottled_usec 1\n", "line 2: nr_throttled"},
		{"plus sign", "nr_periods +1\nnr_throttled 1\nthrottled_usec 1\n", "not a decimal integer"},
		{"two spaces", "nr_periods  1\nnr_throttled 1\nthrottled_usec 1\n", "not a decimal integer"},
		{"trailing space", "nr_periods 1 \nnr_throttled 1\nthrottled_usec 1\n", "not a decimal integer"},
		{"carriage return", "nr_periods 1\r\nnr_throttled 1\nthrottled_usec 1\n", "not a decimal integer"},
		{"key without value", "nr_periods\nnr_throttled 1\nthrottled_usec 1\n", `line 1: "nr_periods": want "key value"`},
		{"key with empty value", "nr_periods \nnr_throttled 1\nthrottled_usec 1\n", "want \"key value\""},
		{"line starting with space", " 1\n", "want \"key value\""},
		{"truncated last line", "nr_periods 1\nnr_throttled 1\nthrottled_usec 1", "line 3: truncated"},
		{"truncated mid key", "nr_periods 1\nnr_thr", "truncated"},
		{"uint64 overflow", "nr_periods 18446744073709551616\nnr_throttled 1\nthrottled_usec 1\n", "overflows uint64"},
		{"huge number", "nr_periods 1\nnr_throttled 99999999999999999999999999\nthrottled_usec 1\n", "overflows uint64"},
		{"usec overflows duration", "nr_periods 1\nnr_throttled 1\nthrottled_usec 9223372036854776\n", "overflows a duration"},
		{"ns overflows duration", "nr_periods 1\nnr_throttled 1\nthrottled_time 9223372036854775808\n", "overflows a duration"},
		{"repeated key", "nr_periods 1\nnr_periods 2\nnr_throttled 1\nthrottled_usec 1\n", "line 2: nr_periods \"2\": repeated key"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := CPUStat{Periods: 42}
			err := ParseCPUStat([]byte(tt.in), &s)
			require.Error(t, err)
			assert.ErrorIs(t, err, ErrMalformed)
			assert.Contains(t, err.Error(), tt.wantInErr)
			assert.Equal(t, CPUStat{Periods: 42}, s, "a failed parse leaves the destination alone")
		})
	}
}

func TestParseMemoryEvents(t *testing.T) {
	tests := []struct {
		name, in  string
		want      MemoryEvents
		wantInErr string
	}{
		{name: "full", in: memoryEvents, want: MemoryEvents{OOM: 3, OOMKill: 2, OOMGroupKill: 1}},
		{name: "old kernel without oom_group_kill", in: "low 0\nhigh 0\nmax 0\noom 1\noom_kill 1\n", want: MemoryEvents{OOM: 1, OOMKill: 1}},
		{name: "unknown keys ignored", in: "oom 0\nsock_throttled 4\noom_kill 0\n"},
		{name: "missing oom_kill", in: "low 0\nhigh 0\nmax 0\noom 1\n", wantInErr: "missing key oom_kill"},
		{name: "missing oom", in: "oom_kill 1\n", wantInErr: "missing key oom"},
		{name: "non-numeric", in: "oom 0\noom_kill one\n", wantInErr: `line 2: oom_kill "one"`},
		{name: "overflow", in: "oom 0\noom_kill 18446744073709551616\n", wantInErr: "overflow"},
		{name: "repeated", in: "oom 0\noom_kill 1\noom_kill 2\n", wantInErr: "repeated key"},
		{name: "truncated", in: "oom 0\noom_kill 1", wantInErr: "truncated"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var e MemoryEvents
			err := ParseMemoryEvents([]byte(tt.in), &e)
			if tt.wantInErr != "" {
				require.Error(t, err)
				assert.ErrorIs(t, err, ErrMalformed)
				assert.Contains(t, err.Error(), tt.wantInErr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, e)
		})
	}
}

func TestParseOOMControl(t *testing.T) {
	tests := []struct {
		name, in  string
		want      OOMControl
		wantInErr string
	}{
		{name: "under oom", in: oomControlV1, want: OOMControl{UnderOOM: true, OOMKill: 5}},
		{name: "kill disabled", in: "oom_kill_disable 1\nunder_oom 0\noom_kill 0\n", want: OOMControl{KillDisabled: true}},
		{name: "unknown keys ignored", in: "oom_kill_disable 0\nunder_oom 0\noom_kill 2\nnew_key 7\n", want: OOMControl{OOMKill: 2}},
		{name: "kernel before 4.13 lacks oom_kill", in: "oom_kill_disable 0\nunder_oom 0\n", wantInErr: "missing key oom_kill"},
		{name: "missing under_oom", in: "oom_kill_disable 0\noom_kill 0\n", wantInErr: "missing key under_oom"},
		{name: "missing oom_kill_disable", in: "under_oom 0\noom_kill 0\n", wantInErr: "missing key oom_kill_disable"},
		{name: "non-numeric", in: "oom_kill_disable no\nunder_oom 0\noom_kill 0\n", wantInErr: `line 1: oom_kill_disable "no"`},
		{name: "truncated", in: "oom_kill_disable 0\nunder_oom 0\noom_kill 1", wantInErr: "truncated"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var c OOMControl
			err := ParseOOMControl([]byte(tt.in), &c)
			if tt.wantInErr != "" {
				require.Error(t, err)
				assert.ErrorIs(t, err, ErrMalformed)
				assert.Contains(t, err.Error(), tt.wantInErr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, c)
		})
	}
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
