package gates_test

import (
	"context"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/cluster/gates"
	"github.com/kerf-dev/kerf/test/controlplane"
	"github.com/kerf-dev/kerf/test/kubetest"
)

// quota creates ResourceQuota ns/name with hard and the usage the quota
// controller would have counted (none runs in these tests).
func quota(t *testing.T, c client.Client, ns, name string, hard, used corev1.ResourceList, mutate func(*corev1.ResourceQuota)) {
	t.Helper()
	ctx := context.Background()
	q := &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: corev1.ResourceQuotaSpec{Hard: hard}}
	if mutate != nil {
		mutate(q)
	}
	require.NoError(t, c.Create(ctx, q))
	if used != nil {
		q.Status = corev1.ResourceQuotaStatus{Hard: hard, Used: used}
		require.NoError(t, c.Status().Update(ctx, q))
	}
}

// TestResourceQuotaBlocksAnInPlaceIncreaseWithoutRoom: the quota charges
// the sum over the running pods of the new values less the old; the block
// names the quota, the resource, the free room and the need.
func TestResourceQuotaBlocksAnInPlaceIncreaseWithoutRoom(t *testing.T) {
	c := controlplane.Get(t).Client
	ctx := context.Background()
	for _, tc := range []struct {
		name, newCPU, newMem string
		ended                bool
		want                 string
	}{
		{name: "memory above the free room", newCPU: "500m", newMem: "512Mi",
			want: "ResourceQuota %s/compute: requests.memory has 256Mi free (hard 1Gi, used 768Mi), the change needs 512Mi more (in-place resize of 2 pods)"},
		{name: "limits.cpu above the free room", newCPU: "2", newMem: "256Mi",
			want: "ResourceQuota %s/compute: limits.cpu has 2 free (hard 4, used 2), the change needs 3 more (in-place resize of 2 pods)"},
		{name: "within the free room", newCPU: "1", newMem: "384Mi"},
		{name: "a decrease", newCPU: "100m", newMem: "128Mi"},
		{name: "an ended pod is not charged", newCPU: "500m", newMem: "512Mi", ended: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ns := kubetest.Namespace(t, c)
			quota(t, c, ns, "compute", quantities("requests.memory", "1Gi", "limits.cpu", "4"),
				quantities("requests.memory", "768Mi", "limits.cpu", "2"), nil)
			pods := webPods(ns, "node-1", 2, "500m", "256Mi")
			if tc.ended {
				pods[1].Status.Phase = corev1.PodSucceeded
			}
			b, err := gates.ResourceQuota{Reader: c}.Check(ctx, webChange(t, ns, 2, v1alpha1.StrategyInPlace, "500m", "256Mi", tc.newCPU, tc.newMem, pods...))
			require.NoError(t, err)
			if tc.want == "" {
				assert.Nil(t, b)
				return
			}
			require.NotNil(t, b)
			assert.Equal(t, v1alpha1.ReasonResourceQuota, b.Reason)
			assert.Equal(t, sprintf(tc.want, ns), b.Message)
		})
	}
}

// TestResourceQuotaChargesARolloutsPeak: a Rollout is charged what the
// rolling update adds at its peak, replicas new pods and maxSurge old
// ones (or maxSurge new and replicas old for a decrease), less what runs.
func TestResourceQuotaChargesARolloutsPeak(t *testing.T) {
	c := controlplane.Get(t).Client
	ctx := context.Background()
	for _, tc := range []struct {
		name     string
		strategy v1alpha1.Strategy
		mutate   func(*appsv1.Deployment)
		newCPU   string
		pods     string
		want     string
	}{
		// 4 replicas, maxSurge 25% is 1: 4×1 + 1×500m − 4×500m = 2500m.
		{name: "default maxSurge", strategy: v1alpha1.StrategyRollout, newCPU: "1",
			want: "ResourceQuota %s/compute: requests.cpu has 2 free (hard 4, used 2), the change needs 2500m more (4 replicas, maxSurge 1, at the rollout's peak)"},
		// maxSurge 2: 4×1 + 2×500m − 2 = 3.
		{name: "maxSurge 2", strategy: v1alpha1.StrategyDeferred, newCPU: "1", mutate: func(d *appsv1.Deployment) {
			d.Spec.Strategy.RollingUpdate = &appsv1.RollingUpdateDeployment{MaxSurge: ptrTo(intstr.FromInt32(2))}
		}, want: "ResourceQuota %s/compute: requests.cpu has 2 free (hard 4, used 2), the change needs 3 more (4 replicas, maxSurge 2, at the rollout's peak)"},
		// Recreate: no surge, 4×(1 − 500m) = 2 fits.
		{name: "Recreate", strategy: v1alpha1.StrategyRollout, newCPU: "1", mutate: func(d *appsv1.Deployment) {
			d.Spec.Strategy.Type = appsv1.RecreateDeploymentStrategyType
		}},
		// A decrease: the surge pod with the new values, 1×400m, fits.
		{name: "a decrease", strategy: v1alpha1.StrategyRollout, newCPU: "400m"},
		// The surge pod is one pod more than the quota's 6 allow.
		{name: "no room for the surge pod", strategy: v1alpha1.StrategyRollout, newCPU: "400m", pods: "6",
			want: "ResourceQuota %s/compute: pods has 0 free (hard 6, used 6), the change needs 1 more (4 replicas, maxSurge 1, at the rollout's peak)"},
		// Deferred starts no pod.
		{name: "Deferred and no room for a pod", strategy: v1alpha1.StrategyDeferred, newCPU: "400m", pods: "6"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ns := kubetest.Namespace(t, c)
			hard, used := quantities("requests.cpu", "4"), quantities("requests.cpu", "2")
			if tc.pods != "" {
				hard[corev1.ResourcePods], used[corev1.ResourcePods] = resource.MustParse(tc.pods), resource.MustParse("6")
			}
			quota(t, c, ns, "compute", hard, used, nil)
			ch := webChange(t, ns, 4, tc.strategy, "500m", "256Mi", tc.newCPU, "256Mi")
			if tc.mutate != nil {
				tc.mutate(ch.Workload.Object.(*appsv1.Deployment))
			}
			b, err := gates.ResourceQuota{Reader: c}.Check(ctx, ch)
			require.NoError(t, err)
			if tc.want == "" {
				assert.Nil(t, b)
				return
			}
			require.NotNil(t, b)
			assert.Equal(t, sprintf(tc.want, ns), b.Message)
		})
	}
}

// TestResourceQuotaMatchesScopes: a quota charges the change only when
// its scopes match the pods, as quota admission matches them (the
// priority class by In, NotIn, Exists and DoesNotExist; an affinity that
// names other namespaces); a quota the quota controller has not counted
// cannot be evaluated.
func TestResourceQuotaMatchesScopes(t *testing.T) {
	c := controlplane.Get(t).Client
	ctx := context.Background()
	for _, tc := range []struct {
		name    string
		mutate  func(*corev1.ResourceQuota)
		pod     func(*corev1.Pod)
		counted bool
		blocks  bool
		err     string
	}{
		{name: "no scope", counted: true, blocks: true},
		{name: "NotBestEffort", counted: true, blocks: true, mutate: func(q *corev1.ResourceQuota) {
			q.Spec.Scopes = []corev1.ResourceQuotaScope{corev1.ResourceQuotaScopeNotBestEffort, corev1.ResourceQuotaScopeNotTerminating}
		}},
		{name: "Terminating", counted: true, mutate: func(q *corev1.ResourceQuota) {
			q.Spec.Scopes = []corev1.ResourceQuotaScope{corev1.ResourceQuotaScopeTerminating}
		}},
		{name: "a priority class the pods lack", counted: true, mutate: priorityScope(corev1.ScopeSelectorOpIn, "high")},
		{name: "the pods' priority class", counted: true, blocks: true, mutate: priorityScope(corev1.ScopeSelectorOpIn, "high"), pod: highPriority},
		{name: "not the pods' priority class", counted: true, mutate: priorityScope(corev1.ScopeSelectorOpNotIn, "high"), pod: highPriority},
		{name: "not a priority class the pods lack", counted: true, blocks: true, mutate: priorityScope(corev1.ScopeSelectorOpNotIn, "high")},
		{name: "any priority class", counted: true, blocks: true, mutate: priorityScope(corev1.ScopeSelectorOpExists), pod: highPriority},
		{name: "no priority class", counted: true, mutate: priorityScope(corev1.ScopeSelectorOpDoesNotExist), pod: highPriority},
		{name: "cross-namespace affinity the pods lack", counted: true, mutate: func(q *corev1.ResourceQuota) {
			q.Spec.Scopes = []corev1.ResourceQuotaScope{corev1.ResourceQuotaScopeCrossNamespacePodAffinity}
		}},
		{name: "the pods' cross-namespace affinity", counted: true, blocks: true, mutate: func(q *corev1.ResourceQuota) {
			q.Spec.Scopes = []corev1.ResourceQuotaScope{corev1.ResourceQuotaScopeCrossNamespacePodAffinity}
		}, pod: func(p *corev1.Pod) {
			p.Spec.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{PreferredDuringSchedulingIgnoredDuringExecution: []corev1.WeightedPodAffinityTerm{{
				Weight: 1, PodAffinityTerm: corev1.PodAffinityTerm{TopologyKey: "kubernetes.io/hostname", NamespaceSelector: &metav1.LabelSelector{}}}}}}
		}},
		{name: "not counted yet", err: "has no usage of requests.memory yet"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ns := kubetest.Namespace(t, c)
			var used corev1.ResourceList
			if tc.counted {
				used = quantities("requests.memory", "768Mi")
			}
			quota(t, c, ns, "compute", quantities("requests.memory", "1Gi"), used, tc.mutate)
			pods := webPods(ns, "node-1", 2, "500m", "256Mi")
			for i := range pods {
				if tc.pod != nil {
					tc.pod(&pods[i])
				}
			}
			b, err := gates.ResourceQuota{Reader: c}.Check(ctx, webChange(t, ns, 2, v1alpha1.StrategyInPlace, "500m", "256Mi", "500m", "512Mi", pods...))
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.blocks, b != nil, "block: %v", b)
		})
	}
}

// priorityScope is a quota's scope selector on the PriorityClass scope.
func priorityScope(op corev1.ScopeSelectorOperator, values ...string) func(*corev1.ResourceQuota) {
	return func(q *corev1.ResourceQuota) {
		q.Spec.ScopeSelector = &corev1.ScopeSelector{MatchExpressions: []corev1.ScopedResourceSelectorRequirement{{
			ScopeName: corev1.ResourceQuotaScopePriorityClass, Operator: op, Values: values}}}
	}
}

// highPriority gives a pod the priority class high.
func highPriority(p *corev1.Pod) { p.Spec.PriorityClassName = "high" }

// TestResourceQuotaPassesWithoutQuotas: a namespace without quotas
// blocks nothing.
func TestResourceQuotaPassesWithoutQuotas(t *testing.T) {
	c := controlplane.Get(t).Client
	ns := kubetest.Namespace(t, c)
	b, err := gates.ResourceQuota{Reader: c}.Check(context.Background(), webChange(t, ns, 2, v1alpha1.StrategyRollout, "500m", "256Mi", "8", "8Gi"))
	require.NoError(t, err)
	assert.Nil(t, b)
}

// TestDefaultChecksTheQuotaBeforeTheBudgetAndTheNode: the leader's gates
// hold ResourceQuota, DisruptionBudget and NodeHeadroom in that order, the
// last of docs/health.md's list.
func TestDefaultChecksTheQuotaBeforeTheBudgetAndTheNode(t *testing.T) {
	var names []string
	for _, g := range gates.Default(controlplane.Get(t).Client, gates.Options{}, nil).Gates {
		names = append(names, g.Name())
	}
	require.Contains(t, names, v1alpha1.ReasonResourceQuota)
	tail := names[slices.Index(names, v1alpha1.ReasonResourceQuota):]
	assert.Equal(t, []string{v1alpha1.ReasonResourceQuota, v1alpha1.ReasonDisruptionBudget, v1alpha1.ReasonNodeHeadroom}, tail)
}
