// Package report holds what kerf-agent reports about a container: the key
// the stream names it by, a reading of its CFS throttling counters (with,
// every usage interval, its CPU and memory usage) and a restart or
// termination that pod discovery saw (docs/design.md sections 5
// and 6). Package node produces these values and node/stream sends them to
// the leader; both import this leaf so that node/stream need not import node.
package report

import (
	"time"

	corev1 "k8s.io/api/core/v1"
)

// ContainerKey names a container the way the stream does: by pod UID and
// container name (docs/design.md section 6).
type ContainerKey struct {
	// PodUID is the pod's metadata.uid.
	PodUID string
	// Name is the container's name in the pod spec.
	Name string
}

// Sample is one reading of a container's CFS throttling counters and, on
// the passes that read it (every usage interval), of its usage.
type Sample struct {
	// Key is the container sampled.
	Key ContainerKey
	// At is when the pass that read it began.
	At time.Time
	// Periods is cpu.stat nr_periods.
	Periods uint64
	// Throttled is cpu.stat nr_throttled.
	Throttled uint64
	// ThrottledTime is cpu.stat throttled_time (v1) or throttled_usec (v2).
	ThrottledTime time.Duration
	// Usage is the container's usage, read in the same pass; meaningful
	// only when HasUsage is true.
	Usage Usage
	// HasUsage is true when the pass read the container's usage: the
	// sampler reads it less often than the throttling counters.
	HasUsage bool
	// OOMKills is the kernel's count of OOM kills in the container's
	// memory cgroup since the cgroup was created (memory.events oom_kill
	// on v2, memory.oom_control oom_kill on v1): an absolute count of this
	// container instance, so an agent that restarted reports the kills
	// made while it was down. Read every usage interval and kept between;
	// meaningful only when HasOOMKills is true.
	OOMKills uint64
	// HasOOMKills is true once the counter was read.
	HasOOMKills bool
}

// Usage is what a container consumed, as the recommender sizes it
// (issue 13), under cadvisor's definitions.
type Usage struct {
	// CPU is the CPU time the container consumed since its cgroup was
	// created (cpuacct.usage, or cpu.stat usage_usec on v2): a counter.
	CPU time.Duration
	// WorkingSet is the memory the container cannot give back without
	// paging: its usage less the inactive page cache, now.
	WorkingSet uint64
	// Peak is the highest memory usage (page cache included) since the
	// container's previous usage reading: exact when the kernel's
	// lifetime peak grew in the interval, else the largest usage the agent
	// sampled in it (see cgroup.IntervalPeak). A reading that was not sent
	// before the next one replaced it has its peak folded into the next.
	Peak uint64
}

// ContainerEvent is a container restart or termination that pod discovery
// saw: through the kubelet's Pods API it is seen before the apiserver has
// the status (docs/design.md sections 3 and 5), so the agent forwards it to
// the leader.
type ContainerEvent struct {
	// Namespace and Pod are the pod's metadata.namespace and metadata.name.
	Namespace, Pod string
	// PodUID is the pod's metadata.uid.
	PodUID string
	// Container is the container's name in the pod spec.
	Container string
	// RestartCount is the container status' restartCount.
	RestartCount int32
	// Terminated is the termination first seen with this event (in
	// state.terminated or lastState.terminated); nil when only the restart
	// count changed.
	Terminated *corev1.ContainerStateTerminated
}
