package healthwatch

import (
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// Termination is how one run of a container ended, as the kubelet reports
// it in state.terminated or lastState.terminated.
type Termination struct {
	// ContainerID is the run's container id, e.g. "containerd://<id>";
	// empty when unknown.
	ContainerID string
	// Reason is the runtime's reason, e.g. "OOMKilled" or "Error".
	Reason string
	// ExitCode is the exit code of the run's main process.
	ExitCode int32
	// StartedAt and FinishedAt are when the run started and ended.
	StartedAt, FinishedAt time.Time
}

// SameRun reports whether t and o are the same run of a container. They
// are when both have the same container id, or, without one, the same
// finish time to the second. The apiserver shows status times to the
// second; the kubelet's Pods API may show them finer. The rules count a
// run once with it, and the agents' store keeps a run once.
func (t *Termination) SameRun(o *Termination) bool {
	if t.ContainerID != "" && o.ContainerID != "" {
		return t.ContainerID == o.ContainerID
	}
	return t.FinishedAt.Truncate(time.Second).Equal(o.FinishedAt.Truncate(time.Second))
}

// AgentStatus is what the node agents saw of a container's status, ahead
// of the apiserver.
type AgentStatus struct {
	// RestartCount is the highest restartCount seen.
	RestartCount int32
	// Terminations are the distinct runs seen ending, oldest finish first;
	// the agents' store (cluster/signals) keeps a bounded number.
	Terminations []Termination
}

// AgentStatusSource gives the container statuses the node agents saw in
// the kubelet's Pods API, which is ahead of the apiserver. A breach is
// acted on as soon as the signal arrives, a pod status update or an agent
// event, whichever is first (docs/design.md section 3). Evaluate takes
// the higher of its restart count and pod status', and counts each
// OOMKilled run once whichever of the two shows it. So this source can
// make a count arrive sooner but never count a restart or a kill twice.
type AgentStatusSource interface {
	// AgentStatus returns what the agents saw of the container; ok is
	// false when they reported nothing about it.
	AgentStatus(podUID types.UID, container string) (status AgentStatus, ok bool)
}
