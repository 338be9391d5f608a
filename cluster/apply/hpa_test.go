package apply_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kerf-dev/kerf/api/v1alpha1"
)

func TestHPATargetMovesSoTheAbsoluteCPUTargetStays(t *testing.T) {
	cases := []struct {
		name       string
		containers []corev1.Container
		target     int32
		values     v1alpha1.ContainerResources
		want       int32
	}{
		{"60% at 500m to 1000m gives 30%", []corev1.Container{appContainer()}, 60, values("app", "1000m", "", "", ""), 30},
		// The HPA divides a pod's usage by the sum of its containers'
		// requests: 600m → 1200m.
		{"requests are summed over the pod's containers", nil, 60, values("app", "1100m", "", "2", ""), 30},
		{"a target above 100% is kept", []corev1.Container{appContainer()}, 80, values("app", "250m", "", "", ""), 160},
		{"rounded to the nearest percent", []corev1.Container{appContainer()}, 70, values("app", "600m", "", "", ""), 58},
		{"never below 1%", []corev1.Container{appContainer()}, 1, values("app", "2", "", "4", ""), 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			w := e.createWorkload(v1alpha1.KindDeployment, "web", workloadOpts{containers: tc.containers})
			e.createHPA("web", w, cpuUtilization(tc.target))
			rsr := e.rsr(w, v1alpha1.StrategyRollout, tc.values)
			rsr.Spec.HPA = &v1alpha1.HPACoordination{Coordinate: true}

			change, err := e.plan(rsr)
			require.NoError(t, err)
			if tc.want == tc.target {
				assert.Nil(t, change.HPA, "an unchanged target is not recorded")
				return
			}
			require.NotNil(t, change.HPA)
			assert.Equal(t, v1alpha1.HPAChange{Name: "web", PreviousTargetCPUUtilization: tc.target, AppliedTargetCPUUtilization: tc.want}, *change.HPA)

			res, err := e.applier.Apply(e.ctx, rsr, change)
			require.NoError(t, err)
			got, rv := e.hpaTarget("web")
			assert.Equal(t, tc.want, got)
			assert.Contains(t, touchedNames(res), "HorizontalPodAutoscaler/web")

			again, err := e.applier.Apply(e.ctx, rsr, change)
			require.NoError(t, err)
			assert.Equal(t, res, again)
			_, rvAgain := e.hpaTarget("web")
			assert.Equal(t, rv, rvAgain, "the second apply does not write the HPA")
		})
	}
}

func TestHPACoordinationFindsTheRightHPAOrSaysWhyNot(t *testing.T) {
	cases := []struct {
		name   string
		setup  func(e *env, w *workload)
		hpa    string // spec.hpa.name
		values v1alpha1.ContainerResources
		moved  string // the HPA whose target moves; "" for none
		note   string // a note Apply gives when none moves
	}{
		{
			name:   "found by its scaleTargetRef",
			setup:  func(e *env, w *workload) { e.createHPA("autoscaler", w, memoryAverageValue("1Gi"), cpuUtilization(60)) },
			values: values("app", "1000m", "", "2", ""),
			moved:  "autoscaler",
		},
		{
			name: "named in spec.hpa.name",
			setup: func(e *env, w *workload) {
				e.createHPA("one", w, cpuUtilization(60))
				e.createHPA("two", w, cpuUtilization(60))
			},
			hpa:    "two",
			values: values("app", "1000m", "", "2", ""),
			moved:  "two",
		},
		{
			name: "several scale the workload and none is named",
			setup: func(e *env, w *workload) {
				e.createHPA("one", w, cpuUtilization(60))
				e.createHPA("two", w, cpuUtilization(60))
			},
			values: values("app", "1000m", "", "2", ""),
			note:   "HPAs one, two all scale Deployment web",
		},
		{
			name: "another workload's HPA",
			setup: func(e *env, w *workload) {
				other := *w
				other.obj = w.obj.DeepCopyObject().(client.Object)
				other.obj.SetName("api")
				e.createHPA("api", &other, cpuUtilization(60))
			},
			values: values("app", "1000m", "", "2", ""),
			note:   "no HPA scales Deployment web",
		},
		{
			name:   "no cpu utilization metric",
			setup:  func(e *env, w *workload) { e.createHPA("web", w, memoryAverageValue("1Gi")) },
			values: values("app", "1000m", "", "2", ""),
			note:   "HPA web has no cpu Resource metric with a Utilization target",
		},
		{
			name:   "no HPA at all",
			setup:  func(*env, *workload) {},
			values: values("app", "1000m", "", "2", ""),
			note:   "no HPA scales Deployment web",
		},
		{
			name:   "a memory-only change leaves the HPA alone",
			setup:  func(e *env, w *workload) { e.createHPA("web", w, cpuUtilization(60)) },
			values: values("app", "", "300Mi", "", ""),
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			w := e.createWorkload(v1alpha1.KindDeployment, "web", workloadOpts{containers: []corev1.Container{appContainer()}})
			tc.setup(e, w)
			rsr := e.rsr(w, v1alpha1.StrategyRollout, tc.values)
			rsr.Spec.HPA = &v1alpha1.HPACoordination{Coordinate: true, Name: tc.hpa}

			change, err := e.plan(rsr)
			require.NoError(t, err)
			res, err := e.applier.Apply(e.ctx, rsr, change)
			require.NoError(t, err)
			if tc.moved != "" {
				require.NotNil(t, change.HPA)
				assert.Equal(t, tc.moved, change.HPA.Name)
				got, _ := e.hpaTarget(tc.moved)
				assert.Equal(t, int32(30), got)
				return
			}
			assert.Nil(t, change.HPA)
			if tc.note == "" {
				assert.Empty(t, res.Notes)
				return
			}
			require.Len(t, res.Notes, 1)
			assert.Contains(t, res.Notes[0], tc.note)
		})
	}
}

func TestHPAChangedBySomeoneElseIsLeftAlone(t *testing.T) {
	e := newEnv(t)
	w := e.createWorkload(v1alpha1.KindDeployment, "web", workloadOpts{containers: []corev1.Container{appContainer()}})
	hpa := e.createHPA("web", w, cpuUtilization(60))
	rsr := e.rsr(w, v1alpha1.StrategyRollout, values("app", "1000m", "", "", ""))
	rsr.Spec.HPA = &v1alpha1.HPACoordination{Coordinate: true}
	change, err := e.plan(rsr)
	require.NoError(t, err)
	require.NotNil(t, change.HPA)

	// Between plan and apply, a person sets 50%.
	require.NoError(t, e.cp.Client.Get(e.ctx, client.ObjectKeyFromObject(hpa), hpa))
	hpa.Spec.Metrics[0].Resource.Target.AverageUtilization = ptr.To(int32(50))
	require.NoError(t, e.cp.Client.Update(e.ctx, hpa))

	res, err := e.applier.Apply(e.ctx, rsr, change)
	require.NoError(t, err)
	got, _ := e.hpaTarget("web")
	assert.Equal(t, int32(50), got, "a person's value wins")
	require.Len(t, res.Notes, 1)
	assert.Contains(t, res.Notes[0], "changed by someone else")
	assert.NotContains(t, touchedNames(res), "HorizontalPodAutoscaler/web")
}
