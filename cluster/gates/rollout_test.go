package gates_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/cluster/gates"
	"github.com/kerf-dev/kerf/cluster/workload"
	"github.com/kerf-dev/kerf/test/kubetest"
)

// TestRolloutInProgressWaitsForTheWorkloadsRollout: a workload whose
// controller has not finished its rollout is blocked, naming what is not
// done; a finished one, or one no controller reported on, passes.
func TestRolloutInProgressWaitsForTheWorkloadsRollout(t *testing.T) {
	done := appsv1.DeploymentStatus{ObservedGeneration: 2, Replicas: 3, UpdatedReplicas: 3, AvailableReplicas: 3, ReadyReplicas: 3,
		Conditions: []appsv1.DeploymentCondition{{Type: appsv1.DeploymentProgressing, Status: corev1.ConditionTrue, Reason: "NewReplicaSetAvailable"}}}
	deployment := func(mutate func(*appsv1.DeploymentStatus)) client.Object {
		d := kubetest.Deployment("shop", "web", "500m", "256Mi")
		d.Generation, d.Spec.Replicas, d.Status = 2, ptr.To[int32](3), *done.DeepCopy()
		mutate(&d.Status)
		return d
	}
	statefulSet := func(mutate func(*appsv1.StatefulSetStatus)) client.Object {
		s := &appsv1.StatefulSet{}
		s.Namespace, s.Name, s.Generation, s.Spec.Replicas = "shop", "db", 2, ptr.To[int32](3)
		s.Status = appsv1.StatefulSetStatus{ObservedGeneration: 2, Replicas: 3, UpdatedReplicas: 3, CurrentRevision: "db-1", UpdateRevision: "db-1"}
		mutate(&s.Status)
		return s
	}
	daemonSet := func(mutate func(*appsv1.DaemonSetStatus)) client.Object {
		d := &appsv1.DaemonSet{}
		d.Namespace, d.Name, d.Generation = "shop", "agent", 2
		d.Status = appsv1.DaemonSetStatus{ObservedGeneration: 2, DesiredNumberScheduled: 4, UpdatedNumberScheduled: 4, NumberAvailable: 4}
		mutate(&d.Status)
		return d
	}
	cases := []struct {
		name string
		obj  client.Object
		want string // "" passes
	}{
		{"Deployment rolled out", deployment(func(*appsv1.DeploymentStatus) {}), ""},
		{"Deployment no controller reported on", deployment(func(s *appsv1.DeploymentStatus) { *s = appsv1.DeploymentStatus{} }), ""},
		{"Deployment generation not observed", deployment(func(s *appsv1.DeploymentStatus) { s.ObservedGeneration = 1 }),
			"generation 2 not observed yet (observedGeneration 1)"},
		{"Deployment replicas not updated", deployment(func(s *appsv1.DeploymentStatus) { s.UpdatedReplicas = 1 }), "1 of 3 replicas updated"},
		{"Deployment replicas not available", deployment(func(s *appsv1.DeploymentStatus) { s.AvailableReplicas = 2 }), "2 of 3 replicas available"},
		{"Deployment old replicas left", deployment(func(s *appsv1.DeploymentStatus) { s.Replicas = 4 }), "1 old replicas still running"},
		{"Deployment progressing", deployment(func(s *appsv1.DeploymentStatus) { s.Conditions[0].Reason = "ReplicaSetUpdated" }),
			"condition Progressing is True (ReplicaSetUpdated)"},
		{"Deployment stalled", deployment(func(s *appsv1.DeploymentStatus) {
			s.Conditions[0].Status, s.Conditions[0].Reason = corev1.ConditionFalse, "ProgressDeadlineExceeded"
		}), "condition Progressing is False (ProgressDeadlineExceeded)"},
		{"StatefulSet rolled out", statefulSet(func(*appsv1.StatefulSetStatus) {}), ""},
		{"StatefulSet revisions differ", statefulSet(func(s *appsv1.StatefulSetStatus) { s.UpdateRevision = "db-2" }),
			"currentRevision db-1 is not updateRevision db-2"},
		{"StatefulSet replicas not updated", statefulSet(func(s *appsv1.StatefulSetStatus) { s.UpdatedReplicas = 2 }), "2 of 3 replicas updated"},
		{"DaemonSet rolled out", daemonSet(func(*appsv1.DaemonSetStatus) {}), ""},
		{"DaemonSet pods not updated", daemonSet(func(s *appsv1.DaemonSetStatus) { s.UpdatedNumberScheduled = 3 }), "3 of 4 pods updated"},
		{"DaemonSet pods unavailable", daemonSet(func(s *appsv1.DaemonSetStatus) { s.NumberUnavailable = 1 }), "1 pods unavailable"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w, err := workload.From(tc.obj)
			require.NoError(t, err)
			b, err := gates.RolloutInProgress{}.Check(context.Background(), &gates.Change{Workload: w, Strategy: v1alpha1.StrategyRollout})
			require.NoError(t, err)
			if tc.want == "" {
				assert.Nil(t, b)
				return
			}
			require.NotNil(t, b)
			assert.Equal(t, v1alpha1.ReasonRolloutInProgress, b.Reason)
			assert.Contains(t, b.Message, w.String()+" is mid-rollout: ")
			assert.Contains(t, b.Message, tc.want)
		})
	}
}
