package scenario

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"

	"github.com/kerf-dev/kerf/internal/sandbox"
)

func TestDeploymentWithoutPlacementIsTheOneNodeScenariosOwn(t *testing.T) {
	d := OOMWorkload.Deployment("ns")
	assert.EqualValues(t, 1, *d.Spec.Replicas)
	spec := d.Spec.Template.Spec
	assert.Nil(t, spec.NodeSelector)
	assert.Nil(t, spec.Tolerations)
	assert.Nil(t, spec.Affinity)
}

func TestDeploymentPinsTolerateAndSpreadAsTheWorkloadSays(t *testing.T) {
	vmToleration := corev1.Toleration{Key: sandbox.VMNodeTaint, Operator: corev1.TolerationOpEqual, Value: "true", Effect: corev1.TaintEffectNoSchedule}
	tests := []struct {
		name        string
		w           Workload
		selector    map[string]string
		tolerations []corev1.Toleration
		spread      bool
		replicas    int32
	}{
		{"pinned to a node", Workload{Name: "a", Node: "host"}, map[string]string{corev1.LabelHostname: "host"}, nil, false, 1},
		{"pinned to the VM node", Workload{Name: "a", Node: sandbox.VMNodeName, TolerateVMNode: true},
			map[string]string{corev1.LabelHostname: sandbox.VMNodeName}, []corev1.Toleration{vmToleration}, false, 1},
		{"one per node, allowed on the VM node", Workload{Name: "a", Replicas: 2, OnePerNode: true, TolerateVMNode: true}, nil, []corev1.Toleration{vmToleration}, true, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.w.CPURequest, tt.w.CPULimit, tt.w.MemoryRequest, tt.w.MemoryLimit = "50m", "500m", "64Mi", "256Mi"
			d := tt.w.Deployment("ns")
			spec := d.Spec.Template.Spec
			assert.EqualValues(t, tt.replicas, *d.Spec.Replicas)
			assert.Equal(t, tt.selector, spec.NodeSelector)
			assert.Equal(t, tt.tolerations, spec.Tolerations)
			if !tt.spread {
				assert.Nil(t, spec.Affinity)
				return
			}
			require.NotNil(t, spec.Affinity)
			require.NotNil(t, spec.Affinity.PodAntiAffinity)
			terms := spec.Affinity.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution
			require.Len(t, terms, 1, "required, not preferred")
			assert.Equal(t, corev1.LabelHostname, terms[0].TopologyKey)
			assert.Equal(t, tt.w.Selector(), terms[0].LabelSelector.MatchLabels)
		})
	}
}

// The JSON of kerf-workload's GET /limits (cmd/kerf-workload's
// TestLimitsEndpointServesTheCgroupUnderCgroupRoot reads the same tree).
func TestLimitsDecodeTheWorkloadsV1AndV2Answers(t *testing.T) {
	tests := []struct {
		name       string
		body       string
		want       Limits
		millis     int64
		memoryFile string
		cpuFile    string
		cpuRequest string
	}{
		{"v2", `{"cgroupVersion":2,"memoryBytes":100663296,"cpuQuotaMicros":50000,"cpuPeriodMicros":100000,"cpuShares":0,"cpuWeight":2,"memoryOOMGroup":true}`,
			Limits{Version: 2, MemoryBytes: 96 * Mi, CPUQuotaMicros: 50000, CPUPeriodMicros: 100000, CPUWeight: 2, MemoryOOMGroup: true}, 500, "memory.max", "cpu.max", "cpu.weight 2"},
		{"v2 without a quota", `{"cgroupVersion":2,"memoryBytes":-1,"cpuQuotaMicros":-1,"cpuPeriodMicros":100000,"cpuShares":0,"cpuWeight":100}`,
			Limits{Version: 2, MemoryBytes: -1, CPUQuotaMicros: -1, CPUPeriodMicros: 100000, CPUWeight: 100}, -1, "memory.max", "cpu.max", "cpu.weight 100"},
		{"v1", `{"cgroupVersion":1,"memoryBytes":268435456,"cpuQuotaMicros":100000,"cpuPeriodMicros":100000,"cpuShares":51,"cpuWeight":0}`,
			Limits{Version: 1, MemoryBytes: 256 * Mi, CPUQuotaMicros: 100000, CPUPeriodMicros: 100000, CPUShares: 51}, 1000, "memory.limit_in_bytes", "cpu.cfs_quota_us", "cpu.shares 51"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var l Limits
			require.NoError(t, json.Unmarshal([]byte(tt.body), &l))
			assert.Equal(t, tt.want, l)
			assert.Equal(t, tt.millis, l.CPUMillis())
			assert.Equal(t, tt.memoryFile, l.MemoryFile())
			assert.Equal(t, tt.cpuFile, l.CPUQuotaFile())
			assert.Equal(t, tt.cpuRequest, cpuRequest(l))
		})
	}
}
