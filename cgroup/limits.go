package cgroup

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
)

// Limits are the limits the kernel enforces on a container, read from its
// cgroup's files on v1 or v2. The JSON is kerf-workload's GET /limits,
// which the scenarios read for pods on a node whose cgroup files they
// cannot see.
type Limits struct {
	// Version is the cgroup version the values come from: 1 or 2.
	Version int `json:"cgroupVersion"`
	// MemoryBytes is v1's memory.limit_in_bytes as the kernel writes it, or
	// v2's memory.max, -1 for "max".
	MemoryBytes int64 `json:"memoryBytes"`
	// CPUQuotaMicros and CPUPeriodMicros are v1's cpu.cfs_quota_us (-1:
	// none) and cpu.cfs_period_us, or the two fields of v2's cpu.max (-1
	// for "max").
	CPUQuotaMicros  int64 `json:"cpuQuotaMicros"`
	CPUPeriodMicros int64 `json:"cpuPeriodMicros"`
	// CPUShares is v1's cpu.shares (0 on v2).
	CPUShares int64 `json:"cpuShares"`
	// CPUWeight is v2's cpu.weight (0 on v1): runc converts the kubelet's
	// shares to it, 1 + (shares-2)*9999/262142 in runc 1.1.
	CPUWeight int64 `json:"cpuWeight"`
	// MemoryOOMGroup says the OOM killer kills every process of the cgroup
	// together: v2's memory.oom.group is 1. False on v1, which has no such
	// setting and kills one process.
	MemoryOOMGroup bool `json:"memoryOOMGroup"`
}

// ReadLimits reads the limits of the cgroup mounted at root, as a
// container sees its /sys/fs/cgroup. On cgroup v2 containerd gives each container
// its own cgroup namespace, so root is the container's cgroup; on v1 runc
// mounts each controller's tree from the container's cgroup. A unified
// mount (root/cgroup.controllers) means v2; otherwise the v1 controller
// directories are read (a hybrid node's v1 trees hold the limits).
func ReadLimits(root string) (Limits, error) {
	_, err := os.Stat(filepath.Join(root, "cgroup.controllers"))
	switch {
	case err == nil:
		return readLimitsV2(root)
	case errors.Is(err, fs.ErrNotExist):
		return readLimitsV1(root)
	default:
		return Limits{}, fmt.Errorf("detect the cgroup version under %s: %w", root, err)
	}
}

// readLimitsV2 reads memory.max, cpu.max, cpu.weight and memory.oom.group
// (the kernel's Documentation/admin-guide/cgroup-v2.rst; a kernel before
// 4.19 has no memory.oom.group and kills one process).
func readLimitsV2(dir string) (Limits, error) {
	l := Limits{Version: 2}
	raw, err := readLimitFile(dir, "memory.max")
	if err != nil {
		return l, err
	}
	if l.MemoryBytes, err = parseLimitMax(raw); err != nil {
		return l, fmt.Errorf("%s: %w", filepath.Join(dir, "memory.max"), err)
	}
	if raw, err = readLimitFile(dir, "cpu.max"); err != nil {
		return l, err
	}
	if l.CPUQuotaMicros, l.CPUPeriodMicros, err = parseCPUMax(raw); err != nil {
		return l, fmt.Errorf("%s: %w", filepath.Join(dir, "cpu.max"), err)
	}
	if l.CPUWeight, err = readLimitValue(dir, "cpu.weight"); err != nil {
		return l, err
	}
	group, err := readLimitValue(dir, "memory.oom.group")
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return l, err
	default:
		l.MemoryOOMGroup = group == 1
	}
	return l, nil
}

// readLimitsV1 reads memory/memory.limit_in_bytes and cpu/cpu.cfs_quota_us,
// cpu.cfs_period_us and cpu.shares.
func readLimitsV1(root string) (Limits, error) {
	l := Limits{Version: 1}
	mem, cpu := filepath.Join(root, "memory"), filepath.Join(root, "cpu")
	var err error
	if l.MemoryBytes, err = readLimitValue(mem, "memory.limit_in_bytes"); err != nil {
		return l, err
	}
	raw, err := readLimitFile(cpu, "cpu.cfs_quota_us")
	if err != nil {
		return l, err
	}
	// The only signed one: -1 when there is no quota.
	if l.CPUQuotaMicros, err = strconv.ParseInt(string(bytes.TrimSpace(raw)), 10, 64); err != nil {
		return l, fmt.Errorf("%s: %w", filepath.Join(cpu, "cpu.cfs_quota_us"), err)
	}
	if l.CPUPeriodMicros, err = readLimitValue(cpu, "cpu.cfs_period_us"); err != nil {
		return l, err
	}
	if l.CPUShares, err = readLimitValue(cpu, "cpu.shares"); err != nil {
		return l, err
	}
	return l, nil
}

func readLimitFile(dir, name string) ([]byte, error) {
	raw, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		return nil, fmt.Errorf("read cgroup limit: %w", err)
	}
	return raw, nil
}

// readLimitValue reads a file of one decimal number and a newline.
func readLimitValue(dir, name string) (int64, error) {
	raw, err := readLimitFile(dir, name)
	if err != nil {
		return 0, err
	}
	var v uint64
	if err := ParseValue(raw, &v); err != nil {
		return 0, fmt.Errorf("%s: %w", filepath.Join(dir, name), err)
	}
	if v > math.MaxInt64 {
		return 0, fmt.Errorf("%s: %d overflows int64", filepath.Join(dir, name), v)
	}
	return int64(v), nil
}

// parseLimitMax parses a v2 file of one number or "max" (-1), and a newline.
func parseLimitMax(raw []byte) (int64, error) {
	if string(raw) == "max\n" {
		return -1, nil
	}
	var v uint64
	if err := ParseValue(raw, &v); err != nil {
		return 0, fmt.Errorf("want a decimal integer or max: %w", err)
	}
	if v > math.MaxInt64 {
		return 0, fmt.Errorf("%d overflows int64", v)
	}
	return int64(v), nil
}

// parseCPUMax parses v2's cpu.max: "$MAX $PERIOD", $MAX a number of
// microseconds or "max" (-1).
func parseCPUMax(raw []byte) (quota, period int64, err error) {
	f := bytes.Fields(raw)
	if len(f) != 2 || !bytes.HasSuffix(raw, []byte("\n")) {
		return 0, 0, fmt.Errorf("%q: want \"$MAX $PERIOD\" and a newline", raw)
	}
	if quota, err = parseLimitMax(append(slices.Clip(f[0]), '\n')); err != nil {
		return 0, 0, fmt.Errorf("quota: %w", err)
	}
	if period, err = parseLimitMax(append(slices.Clip(f[1]), '\n')); err != nil || period <= 0 {
		return 0, 0, fmt.Errorf("period %q: want a positive number of microseconds", f[1])
	}
	return quota, period, nil
}

// CPUMillis is the quota as millicores (-1: none), on v1 and v2.
func (l Limits) CPUMillis() int64 {
	if l.CPUQuotaMicros < 0 || l.CPUPeriodMicros == 0 {
		return -1
	}
	return l.CPUQuotaMicros * 1000 / l.CPUPeriodMicros
}

// MemoryFile names the file MemoryBytes comes from.
func (l Limits) MemoryFile() string {
	if l.Version == 2 {
		return "memory.max"
	}
	return "memory.limit_in_bytes"
}

// CPUQuotaFile names the file the CPU quota comes from.
func (l Limits) CPUQuotaFile() string {
	if l.Version == 2 {
		return "cpu.max"
	}
	return "cpu.cfs_quota_us"
}
