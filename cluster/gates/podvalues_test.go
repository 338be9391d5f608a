package gates_test

import (
	"fmt"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/cluster/gates"
	"github.com/kerf-dev/kerf/cluster/workload"
	"github.com/kerf-dev/kerf/test/kubetest"
)

// webChange is a change of Deployment ns/web's container app, from
// requests equal to limits of cpu and mem to newCPU and newMem, with
// strategy s, on pods.
func webChange(t testing.TB, ns string, replicas int32, s v1alpha1.Strategy, cpu, mem, newCPU, newMem string, pods ...corev1.Pod) *gates.Change {
	t.Helper()
	dep := kubetest.Deployment(ns, "web", cpu, mem)
	dep.Spec.Replicas = &replicas
	values := func(c, m string) *v1alpha1.ResourceValues {
		return &v1alpha1.ResourceValues{CPU: kubetest.Q(c), Memory: kubetest.Q(m)}
	}
	return &gates.Change{
		Workload: &workload.Workload{Kind: v1alpha1.KindDeployment, Object: dep, Template: &dep.Spec.Template,
			Selector: dep.Spec.Selector, UpdateStrategy: string(appsv1.RollingUpdateDeploymentStrategyType)},
		Strategy: s,
		Containers: []v1alpha1.ContainerChange{{Name: "app",
			Previous: v1alpha1.Resources{Requests: values(cpu, mem), Limits: values(cpu, mem)},
			Applied:  v1alpha1.Resources{Requests: values(newCPU, newMem), Limits: values(newCPU, newMem)}}},
		Pods: pods,
	}
}

// webPods are n running pods of Deployment ns/web asking cpu and mem
// (requests equal to limits), on node, as a kubelet reports them.
func webPods(ns, node string, n int, cpu, mem string) []corev1.Pod {
	pods := make([]corev1.Pod, n)
	for i := range pods {
		dep := kubetest.Deployment(ns, "web", cpu, mem)
		pods[i] = corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("web-%d", i), Labels: dep.Spec.Template.Labels},
			Spec:       *dep.Spec.Template.Spec.DeepCopy(),
		}
		pods[i].Spec.NodeName = node
		pods[i].Status = corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{{
			Name: "app", Resources: pods[i].Spec.Containers[0].Resources.DeepCopy()}}}
	}
	return pods
}

// quantities is a resource list of name, value pairs.
func quantities(pairs ...string) corev1.ResourceList {
	out := corev1.ResourceList{}
	for i := 0; i+1 < len(pairs); i += 2 {
		out[corev1.ResourceName(pairs[i])] = resource.MustParse(pairs[i+1])
	}
	return out
}

// sprintf is fmt.Sprintf, for the tables' wanted messages.
func sprintf(format string, args ...any) string { return fmt.Sprintf(format, args...) }

// ptrTo points to a copy of v.
func ptrTo[T any](v T) *T { return &v }
