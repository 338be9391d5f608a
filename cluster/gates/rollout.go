package gates

import (
	"context"
	"fmt"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/cluster/policy"
)

// RolloutInProgress refuses a change while the workload is mid-rollout:
// its controller has not finished the last one. A change applied then
// would mix with it, and the watch could not tell whose harm it saw.
//
// It reads the workload's status as its controller writes it, the checks
// kubectl rollout status makes. A status never written (observedGeneration
// 0) is not judged: no controller reports on the workload, and waiting
// would wait for ever.
type RolloutInProgress struct{}

// Name is the gate's reason, RolloutInProgress.
func (RolloutInProgress) Name() string { return v1alpha1.ReasonRolloutInProgress }

// Check blocks a change to a workload whose rollout is not done, naming
// what is not done yet.
func (g RolloutInProgress) Check(_ context.Context, ch *Change) (*policy.Block, error) {
	var pending []string
	switch o := ch.Workload.Object.(type) {
	case *appsv1.Deployment:
		pending = deploymentPending(o)
	case *appsv1.StatefulSet:
		pending = statefulSetPending(o)
	case *appsv1.DaemonSet:
		pending = daemonSetPending(o)
	}
	if len(pending) == 0 {
		return nil, nil
	}
	return &policy.Block{Reason: g.Name(),
		Message: fmt.Sprintf("%s is mid-rollout: %s", ch.Workload, strings.Join(pending, "; "))}, nil
}

// deploymentPending says what of a Deployment's rollout is not done.
func deploymentPending(d *appsv1.Deployment) []string {
	st := &d.Status
	if st.ObservedGeneration == 0 {
		return nil
	}
	var out []string
	if st.ObservedGeneration < d.Generation {
		out = append(out, fmt.Sprintf("generation %d not observed yet (observedGeneration %d)", d.Generation, st.ObservedGeneration))
	}
	want := replicas(d.Spec.Replicas)
	if st.UpdatedReplicas < want {
		out = append(out, fmt.Sprintf("%d of %d replicas updated", st.UpdatedReplicas, want))
	}
	if st.AvailableReplicas < want {
		out = append(out, fmt.Sprintf("%d of %d replicas available", st.AvailableReplicas, want))
	}
	if st.Replicas > st.UpdatedReplicas {
		out = append(out, fmt.Sprintf("%d old replicas still running", st.Replicas-st.UpdatedReplicas))
	}
	for _, c := range st.Conditions {
		// The deployment controller's reason for a finished rollout.
		if c.Type == appsv1.DeploymentProgressing && (c.Status != corev1.ConditionTrue || c.Reason != "NewReplicaSetAvailable") {
			out = append(out, fmt.Sprintf("condition Progressing is %s (%s)", c.Status, c.Reason))
		}
	}
	return out
}

// statefulSetPending says what of a StatefulSet's rollout is not done.
func statefulSetPending(s *appsv1.StatefulSet) []string {
	st := &s.Status
	if st.ObservedGeneration == 0 {
		return nil
	}
	var out []string
	if st.ObservedGeneration < s.Generation {
		out = append(out, fmt.Sprintf("generation %d not observed yet (observedGeneration %d)", s.Generation, st.ObservedGeneration))
	}
	if st.CurrentRevision != st.UpdateRevision {
		out = append(out, fmt.Sprintf("currentRevision %s is not updateRevision %s", st.CurrentRevision, st.UpdateRevision))
	}
	if want := replicas(s.Spec.Replicas); st.UpdatedReplicas < want {
		out = append(out, fmt.Sprintf("%d of %d replicas updated", st.UpdatedReplicas, want))
	}
	return out
}

// daemonSetPending says what of a DaemonSet's rollout is not done.
func daemonSetPending(d *appsv1.DaemonSet) []string {
	st := &d.Status
	if st.ObservedGeneration == 0 {
		return nil
	}
	var out []string
	if st.ObservedGeneration < d.Generation {
		out = append(out, fmt.Sprintf("generation %d not observed yet (observedGeneration %d)", d.Generation, st.ObservedGeneration))
	}
	if st.UpdatedNumberScheduled < st.DesiredNumberScheduled {
		out = append(out, fmt.Sprintf("%d of %d pods updated", st.UpdatedNumberScheduled, st.DesiredNumberScheduled))
	}
	if st.NumberUnavailable > 0 {
		out = append(out, fmt.Sprintf("%d pods unavailable", st.NumberUnavailable))
	}
	return out
}

// replicas is spec.replicas, 1 when unset as the apiserver defaults it.
func replicas(n *int32) int32 {
	if n == nil {
		return 1
	}
	return *n
}
