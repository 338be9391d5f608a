// Package report holds what kerf-agent reports about a container: the key
// the stream names it by, a reading of its CFS throttling counters and a
// restart or termination that pod discovery saw (docs/design.md sections 5
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

// Sample is one reading of a container's CFS throttling counters.
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
