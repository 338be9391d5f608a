package gates_test

import (
	"testing"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/cluster/gates"
	"github.com/kerf-dev/kerf/cluster/workload"
	"github.com/kerf-dev/kerf/test/kubetest"
)

// values are a container's requests and limits of cpu and memory; "" is
// absent.
type values struct{ reqCPU, reqMem, limCPU, limMem string }

// resourcesOf is v in Kerf's types.
func resourcesOf(v values) v1alpha1.Resources {
	var r v1alpha1.Resources
	set := func(vals **v1alpha1.ResourceValues, cpu, mem string) {
		if cpu == "" && mem == "" {
			return
		}
		*vals = &v1alpha1.ResourceValues{}
		if cpu != "" {
			(*vals).CPU = kubetest.Q(cpu)
		}
		if mem != "" {
			(*vals).Memory = kubetest.Q(mem)
		}
	}
	set(&r.Requests, v.reqCPU, v.reqMem)
	set(&r.Limits, v.limCPU, v.limMem)
	return r
}

// changeOf is a change of Deployment dep's container app to applied,
// with strategy.
func changeOf(t *testing.T, dep *appsv1.Deployment, strategy v1alpha1.Strategy, applied values) *gates.Change {
	t.Helper()
	w, err := workload.From(dep)
	require.NoError(t, err)
	return &gates.Change{Workload: w, Strategy: strategy,
		Containers: []v1alpha1.ContainerChange{{Name: "app", Applied: resourcesOf(applied)}}}
}
