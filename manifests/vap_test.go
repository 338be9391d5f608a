package manifests_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/cluster"
	kerfapply "github.com/kerf-dev/kerf/cluster/apply"
	"github.com/kerf-dev/kerf/cluster/cert"
	"github.com/kerf-dev/kerf/cluster/resources"
	"github.com/kerf-dev/kerf/cluster/signals"
	"github.com/kerf-dev/kerf/cluster/webhook"
	"github.com/kerf-dev/kerf/cluster/workload"
	"github.com/kerf-dev/kerf/internal/kube"
	"github.com/kerf-dev/kerf/test/controlplane"
	"github.com/kerf-dev/kerf/test/kustomizetest"
)

// leaderPod is the pod the impersonated leader's token is bound to.
const leaderPod = "kerf-leader-0"

// asLeaderPod returns clients that act as kerf-leader's service account
// with a token bound to pod leaderPod, as the kubelet's projected token is
// (the apiserver adds the pod's name to the user's extra).
func asLeaderPod(t *testing.T, cp *controlplane.ControlPlane) (client.Client, kubernetes.Interface) {
	t.Helper()
	cfg := rest.CopyConfig(cp.Config)
	cfg.Impersonate = rest.ImpersonationConfig{
		UserName: leaderSA,
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:" + namespace, "system:authenticated"},
		Extra:    map[string][]string{"authentication.kubernetes.io/pod-name": {leaderPod}},
	}
	c, err := client.New(cfg, client.Options{Scheme: kube.Scheme})
	require.NoError(t, err)
	cs, err := kubernetes.NewForConfig(cfg)
	require.NoError(t, err)
	return c, cs
}

// policyWorld is what the policy tests write to: a workload namespace with
// a Deployment, its HPA and a pod bound to a node; kerf-system with the
// leader's pod, a former leader's and an agent's; a Deployment in
// kube-system.
type policyWorld struct {
	ns string
	c  client.Client        // as kerf-leader
	cs kubernetes.Interface // as kerf-leader
}

func container(name, image string) corev1.Container {
	return corev1.Container{Name: name, Image: image, Resources: corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m"), corev1.ResourceMemory: resource.MustParse("256Mi")},
		Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m"), corev1.ResourceMemory: resource.MustParse("256Mi")},
	}}
}

func testDeployment(ns, name string) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](2),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					InitContainers: []corev1.Container{container("init", "busybox:1")},
					Containers:     []corev1.Container{container("app", "kerf.local/kerf-workload:dev")},
				},
			},
		},
	}
}

func testPod(ns, name string, labels map[string]string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
		Spec:       corev1.PodSpec{NodeName: "vap-node", Containers: []corev1.Container{container("app", "kerf.local/kerf-workload:dev")}},
	}
}

// setUpPolicyWorld installs the manifests, creates the objects and waits
// until the apiserver enforces the policies.
func setUpPolicyWorld(t *testing.T) *policyWorld {
	t.Helper()
	cp, _ := installed(t)
	ctx := context.Background()
	admin := cp.Client
	ns := controlplane.UniqueName("vap")
	require.NoError(t, admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))

	// A node with room: the apiserver checks a resize against it.
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "vap-node", Labels: map[string]string{corev1.LabelOSStable: "linux"}}}
	if err := admin.Create(ctx, node); err == nil {
		capacity := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("8"), corev1.ResourceMemory: resource.MustParse("16Gi"), corev1.ResourcePods: resource.MustParse("110")}
		node.Status.Capacity, node.Status.Allocatable = capacity, capacity
		require.NoError(t, admin.Status().Update(ctx, node))
	} else {
		require.True(t, apierrors.IsAlreadyExists(err), "create node: %v", err)
	}

	for _, obj := range []client.Object{
		testDeployment(ns, "web"),
		testDeployment(metav1.NamespaceSystem, controlplane.UniqueName("dns")),
		&autoscalingv2.HorizontalPodAutoscaler{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"},
			Spec: autoscalingv2.HorizontalPodAutoscalerSpec{
				ScaleTargetRef: autoscalingv2.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "web"},
				MinReplicas:    ptr.To[int32](1), MaxReplicas: 5,
				Metrics: []autoscalingv2.MetricSpec{
					{Type: autoscalingv2.ResourceMetricSourceType, Resource: &autoscalingv2.ResourceMetricSource{
						Name: corev1.ResourceMemory, Target: autoscalingv2.MetricTarget{Type: autoscalingv2.AverageValueMetricType, AverageValue: ptr.To(resource.MustParse("1Gi"))}}},
					{Type: autoscalingv2.ResourceMetricSourceType, Resource: &autoscalingv2.ResourceMetricSource{
						Name: corev1.ResourceCPU, Target: autoscalingv2.MetricTarget{Type: autoscalingv2.UtilizationMetricType, AverageUtilization: ptr.To[int32](60)}}},
				},
			},
		},
		testPod(ns, "web-1", map[string]string{"app": "web"}),
		testPod(metav1.NamespaceSystem, "kube-proxy-x", nil),
		testPod(namespace, leaderPod, map[string]string{"app.kubernetes.io/component": "leader"}),
		testPod(namespace, "kerf-leader-former", map[string]string{"app.kubernetes.io/component": "leader", cluster.LeaderPodLabel: "true"}),
		testPod(namespace, "kerf-agent-x", map[string]string{"app.kubernetes.io/component": "agent"}),
	} {
		err := admin.Create(ctx, obj)
		if apierrors.IsAlreadyExists(err) && obj.GetNamespace() != ns {
			err = nil // the kerf-system pods of an earlier run (-count=N)
		}
		require.NoError(t, err, "create %s", obj.GetName())
	}

	// RBAC broader than manifests/ grants, in this namespace only: the
	// policy, not RBAC, must refuse what the leader does not do there.
	require.NoError(t, admin.Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "broad"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"patch"}}}}))
	require.NoError(t, admin.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "broad"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "broad"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: namespace, Name: "kerf-leader"}}}))

	c, cs := asLeaderPod(t, cp)
	w := &policyWorld{ns: ns, c: c, cs: cs}
	// A policy is enforced once the apiserver has loaded it: wait until an
	// image change is refused. Each try names another image: one that
	// passed before the policy was loaded would make the next the same
	// image, no change, which the policy lets through.
	tries := 0
	require.Eventually(t, func() bool {
		tries++
		err := w.strategic(&appsv1.Deployment{}, ns, "web", fmt.Sprintf(`{"spec":{"template":{"spec":{"containers":[{"name":"app","image":"wait-for-policy:%d"}]}}}}`, tries))
		return err != nil && strings.Contains(err.Error(), "kerf-leader")
	}, 30*time.Second, 200*time.Millisecond, "the apiserver never enforced manifests/vap.yaml")
	return w
}

func (w *policyWorld) strategic(obj client.Object, ns, name, patch string) error {
	obj.SetNamespace(ns)
	obj.SetName(name)
	return w.c.Patch(context.Background(), obj, client.RawPatch(types.StrategicMergePatchType, []byte(patch)))
}

func (w *policyWorld) merge(obj client.Object, ns, name, patch string) error {
	obj.SetNamespace(ns)
	obj.SetName(name)
	return w.c.Patch(context.Background(), obj, client.RawPatch(types.MergePatchType, []byte(patch)))
}

// resize writes pods/resize as cluster/apply does: the pod read, its
// container's requests and limits changed, UpdateResize.
func (w *policyWorld) resize(ns, name, cpu string, mutate func(*corev1.Pod)) error {
	ctx := context.Background()
	pod, err := w.cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	pod.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU] = resource.MustParse(cpu)
	pod.Spec.Containers[0].Resources.Limits[corev1.ResourceCPU] = resource.MustParse(cpu)
	if mutate != nil {
		mutate(pod)
	}
	_, err = w.cs.CoreV1().Pods(ns).UpdateResize(ctx, name, pod, metav1.UpdateOptions{})
	return err
}

func (w *policyWorld) hpa(mutate func(*autoscalingv2.HorizontalPodAutoscaler)) error {
	ctx := context.Background()
	var hpa autoscalingv2.HorizontalPodAutoscaler
	if err := w.c.Get(ctx, client.ObjectKey{Namespace: w.ns, Name: "web"}, &hpa); err != nil {
		return err
	}
	orig := hpa.DeepCopy()
	mutate(&hpa)
	return w.c.Patch(ctx, &hpa, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{}))
}

// TestTheLeaderMayChangeOnlyResourcesItsAnnotationsTheHPATargetAndItsLabel
// makes, as kerf-leader's service account (its real RBAC applied), the
// writes the leader makes and the ones a stolen token would: the first
// pass, the second are refused by manifests/vap.yaml with a message naming
// what was refused. RBAC allows every one of them, so without the policies
// all of them pass.
func TestTheLeaderMayChangeOnlyResourcesItsAnnotationsTheHPATargetAndItsLabel(t *testing.T) {
	w := setUpPolicyWorld(t)
	ns := w.ns
	var kubeSystemDep appsv1.DeploymentList
	require.NoError(t, controlplane.Get(t).Client.List(context.Background(), &kubeSystemDep, client.InNamespace(metav1.NamespaceSystem)))
	require.NotEmpty(t, kubeSystemDep.Items)
	dns := kubeSystemDep.Items[0].Name
	resourcesPatch := `{"spec":{"template":{"spec":{"containers":[{"name":"app","resources":{"requests":{"cpu":"300m"},"limits":{"cpu":"300m"}}}]}}}}`
	// A Deployment whose pods set pod-level resources, which the leader
	// changes (the (pod) entry, docs/health.md).
	var web appsv1.Deployment
	require.NoError(t, controlplane.Get(t).Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "web"}, &web))
	podLevel := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "podlevel"}, Spec: *web.Spec.DeepCopy()}
	podLevel.Spec.Template.Spec.Resources = &corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")}}
	require.NoError(t, client.IgnoreAlreadyExists(controlplane.Get(t).Client.Create(context.Background(), podLevel)))
	podLevelPatch := `{"spec":{"template":{"spec":{"resources":{"limits":{"memory":"768Mi"}}}}}}`

	cases := []struct {
		name  string
		write func() error
		// refused is "" for a write that passes, else a part of the
		// policy's message.
		refused string
	}{
		// What the leader writes (cluster/apply, cluster/rightsizing/record.go,
		// cluster/leaderpod.go).
		{"a Deployment container's resources", func() error { return w.strategic(&appsv1.Deployment{}, ns, "web", resourcesPatch) }, ""},
		{"removing a limit", func() error {
			return w.strategic(&appsv1.Deployment{}, ns, "web", `{"spec":{"template":{"spec":{"containers":[{"name":"app","resources":{"limits":{"memory":null}}}]}}}}`)
		}, ""},
		{"the kerf.dev/rollback-state annotation", func() error {
			return w.merge(&appsv1.Deployment{}, ns, "web", `{"metadata":{"annotations":{"`+v1alpha1.RollbackStateAnnotation+`":"{}"}}}`)
		}, ""},
		{"the HPA's cpu utilization target", func() error {
			return w.hpa(func(h *autoscalingv2.HorizontalPodAutoscaler) {
				h.Spec.Metrics[1].Resource.Target.AverageUtilization = ptr.To[int32](45)
			})
		}, ""},
		{"a pod's resize", func() error { return w.resize(ns, "web-1", "400m", nil) }, ""},
		{"the pod-level resources a pod template sets", func() error { return w.strategic(&appsv1.Deployment{}, ns, "podlevel", podLevelPatch) }, ""},
		{"the leader label on its own pod", func() error {
			return w.merge(&corev1.Pod{}, namespace, leaderPod, `{"metadata":{"labels":{"kerf.dev/leader":"true"}}}`)
		}, ""},
		{"removing the label from a former leader's pod", func() error {
			return w.merge(&corev1.Pod{}, namespace, "kerf-leader-former", `{"metadata":{"labels":{"kerf.dev/leader":null}}}`)
		}, ""},

		// What a stolen token would.
		{"a Deployment's image", func() error {
			return w.strategic(&appsv1.Deployment{}, ns, "web", `{"spec":{"template":{"spec":{"containers":[{"name":"app","image":"evil:1"}]}}}}`)
		}, "containers, and every other field of them, stay as they are"},
		{"a privileged container", func() error {
			return w.strategic(&appsv1.Deployment{}, ns, "web", `{"spec":{"template":{"spec":{"containers":[{"name":"app","securityContext":{"privileged":true}}]}}}}`)
		}, "containers, and every other field of them, stay as they are"},
		{"an added container", func() error {
			return w.strategic(&appsv1.Deployment{}, ns, "web", `{"spec":{"template":{"spec":{"containers":[{"name":"miner","image":"evil:1"}]}}}}`)
		}, "containers, and every other field of them, stay as they are"},
		{"an init container's resources", func() error {
			return w.strategic(&appsv1.Deployment{}, ns, "web", `{"spec":{"template":{"spec":{"initContainers":[{"name":"init","resources":{"requests":{"cpu":"100m"}}}]}}}}`)
		}, "not the rest of its pod spec"},
		{"pod-level resources added to a pod template", func() error { return w.strategic(&appsv1.Deployment{}, ns, "web", podLevelPatch) }, "not the rest of its pod spec"},
		{"the pod's host network", func() error {
			return w.strategic(&appsv1.Deployment{}, ns, "web", `{"spec":{"template":{"spec":{"hostNetwork":true}}}}`)
		}, "not the rest of its pod spec"},
		{"a pod template label", func() error {
			return w.strategic(&appsv1.Deployment{}, ns, "web", `{"spec":{"template":{"metadata":{"labels":{"evil":"1"}}}}}`)
		}, "not its spec or pod template metadata"},
		{"the replicas", func() error { return w.merge(&appsv1.Deployment{}, ns, "web", `{"spec":{"replicas":9}}`) }, "not its spec or pod template metadata"},
		{"a Deployment's label", func() error {
			return w.merge(&appsv1.Deployment{}, ns, "web", `{"metadata":{"labels":{"app":"other"}}}`)
		}, "only kerf.dev/ annotations in the metadata"},
		{"another annotation", func() error {
			return w.merge(&appsv1.Deployment{}, ns, "web", `{"metadata":{"annotations":{"example.com/x":"1"}}}`)
		}, "only kerf.dev/ annotations in the metadata"},
		{"resources in kube-system", func() error { return w.strategic(&appsv1.Deployment{}, metav1.NamespaceSystem, dns, resourcesPatch) }, "may not write anything in kube-system"},
		{"a pod's resize in kube-system", func() error { return w.resize(metav1.NamespaceSystem, "kube-proxy-x", "400m", nil) }, "may not write anything in kube-system"},
		{"the HPA's maxReplicas", func() error {
			return w.hpa(func(h *autoscalingv2.HorizontalPodAutoscaler) { h.Spec.MaxReplicas = 50 })
		}, "only the cpu Utilization target"},
		{"the HPA's memory target", func() error {
			return w.hpa(func(h *autoscalingv2.HorizontalPodAutoscaler) {
				h.Spec.Metrics[0].Resource.Target.AverageValue = ptr.To(resource.MustParse("8Gi"))
			})
		}, "only the cpu Utilization target"},
		{"the leader label on another namespace's pod", func() error {
			return w.merge(&corev1.Pod{}, ns, "web-1", `{"metadata":{"labels":{"kerf.dev/leader":"true"}}}`)
		}, "only through pods/resize"},
		{"the leader label on the agent's pod", func() error {
			return w.merge(&corev1.Pod{}, namespace, "kerf-agent-x", `{"metadata":{"labels":{"kerf.dev/leader":"true"}}}`)
		}, "may set kerf.dev/leader only on its own pod " + leaderPod},
		{"another label on its own pod", func() error {
			return w.merge(&corev1.Pod{}, namespace, leaderPod, `{"metadata":{"labels":{"app.kubernetes.io/component":"agent"}}}`)
		}, "only the kerf.dev/leader label"},
		{"a Secret of another name in kerf-system", func() error {
			// As cert.EnsureSelfManaged makes its Secrets, but for the name:
			// kerf-leader-fields passes it, kerf-leader-writes does not.
			return w.c.Create(context.Background(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "stolen",
				Labels: map[string]string{"app.kubernetes.io/name": "kerf", "app.kubernetes.io/component": "webhook", "app.kubernetes.io/managed-by": "kerf"}},
				Type: corev1.SecretTypeTLS, StringData: map[string]string{"tls.crt": "", "tls.key": "", "ca.crt": "", "ca.key": ""}})
		}, "writes only kerf-webhook-cert, kerf-leader-cert of /secrets"},
		{"a ConfigMap of another name in kerf-system", func() error {
			return w.c.Create(context.Background(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "stolen",
				Labels: map[string]string{"app.kubernetes.io/name": "kerf", "app.kubernetes.io/component": "leader"}}})
		}, "writes only kerf-leader-ca, kerf-hub-delivery of /configmaps"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.write()
			if tc.refused == "" {
				assert.NoError(t, err)
				return
			}
			require.Error(t, err, "refused")
			assert.True(t, apierrors.IsForbidden(err) || apierrors.IsInvalid(err), "a refusal, not %v", err)
			assert.Contains(t, err.Error(), "ValidatingAdmissionPolicy", "refused by a policy, not by RBAC")
			assert.Contains(t, err.Error(), tc.refused)
		})
	}
}

// TestTheLeadersApplierPassesThePolicy runs cluster/apply's Applier, the
// code the leader applies a change with, as kerf-leader's service account:
// a Rollout with HPA coordination, then its restore, both pass.
func TestTheLeadersApplierPassesThePolicy(t *testing.T) {
	w := setUpPolicyWorld(t)
	ctx := context.Background()
	a := &kerfapply.Applier{Client: w.c, Clientset: w.cs}
	rsr := &v1alpha1.RightsizingRecommendation{
		ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: "web"},
		Spec: v1alpha1.RightsizingRecommendationSpec{
			TargetRef:  v1alpha1.TargetRef{Kind: v1alpha1.KindDeployment, Name: "web"},
			Strategy:   v1alpha1.StrategyRollout,
			HPA:        &v1alpha1.HPACoordination{Coordinate: true},
			Containers: []v1alpha1.ContainerResources{{Name: "app", Requests: &v1alpha1.ResourceValues{CPU: ptr.To(resource.MustParse("1"))}, Limits: &v1alpha1.ResourceValues{CPU: ptr.To(resource.MustParse("1"))}}},
		},
	}
	wl, err := workload.Get(ctx, w.c, w.ns, rsr.Spec.TargetRef)
	require.NoError(t, err)
	current, err := a.Running(ctx, wl, rsr.Spec.Strategy)
	require.NoError(t, err)
	change, err := a.Plan(ctx, rsr, wl, current)
	require.NoError(t, err)
	require.NotNil(t, change.HPA, "the HPA target moves")
	_, err = a.Apply(ctx, rsr, change)
	require.NoError(t, err, "the leader's apply passes the policy")

	var dep appsv1.Deployment
	require.NoError(t, w.c.Get(ctx, client.ObjectKey{Namespace: w.ns, Name: "web"}, &dep))
	assert.Equal(t, "1", dep.Spec.Template.Spec.Containers[0].Resources.Requests.Cpu().String())
	var hpa autoscalingv2.HorizontalPodAutoscaler
	require.NoError(t, w.c.Get(ctx, client.ObjectKey{Namespace: w.ns, Name: "web"}, &hpa))
	assert.Equal(t, change.HPA.AppliedTargetCPUUtilization, *hpa.Spec.Metrics[1].Resource.Target.AverageUtilization)

	// The restore carries the rollback-state mirror in its template
	// patch, as the leader's does: both in one write pass the policy.
	state := `{"state":"backingOff","turn":1}`
	res, err := a.Restore(ctx, rsr, change, resources.Previous(change), []v1alpha1.ResourceName{v1alpha1.ResourceCPU},
		map[string]*string{v1alpha1.RollbackStateAnnotation: &state})
	require.NoError(t, err, "the leader's restore passes the policy")
	assert.True(t, res.Annotated)
	require.NoError(t, w.c.Get(ctx, client.ObjectKey{Namespace: w.ns, Name: "web"}, &dep))
	assert.Equal(t, state, dep.Annotations[v1alpha1.RollbackStateAnnotation])
}

// TestEveryResourceTheLeaderMayWriteIsInThePolicy keeps rbac-leader.yaml
// and vap.yaml in step: a write RBAC grants that kerf-leader-writes does
// not list would be refused at run time.
func TestEveryResourceTheLeaderMayWriteIsInThePolicy(t *testing.T) {
	objs := kustomizetest.Objects(t, kustomizetest.Manifests(t))
	var vap admissionregistrationv1.ValidatingAdmissionPolicy
	kustomizetest.Object(t, objs, "ValidatingAdmissionPolicy", "kerf-leader-writes", &vap)
	var written []string
	for _, v := range vap.Spec.Variables {
		if v.Name == "written" {
			for _, m := range regexp.MustCompile(`'([^']*)'`).FindAllStringSubmatch(v.Expression, -1) {
				written = append(written, m[1])
			}
		}
	}
	require.NotEmpty(t, written, "kerf-leader-writes has the variable written")

	var rules []rbacv1.PolicyRule
	var cr rbacv1.ClusterRole
	kustomizetest.Object(t, objs, "ClusterRole", "kerf-leader", &cr)
	var role rbacv1.Role
	kustomizetest.Object(t, objs, "Role", "kerf-leader", &role)
	rules = append(append(rules, cr.Rules...), role.Rules...)
	writes := []string{"create", "update", "patch", "delete", "deletecollection", "*"}
	for _, r := range rules {
		if !slices.ContainsFunc(r.Verbs, func(v string) bool { return slices.Contains(writes, v) }) {
			continue
		}
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				assert.Contains(t, written, g+"/"+res, "RBAC lets kerf-leader %v %s in group %q: list it in vap.yaml's written (and docs/security.md)", r.Verbs, res, g)
			}
		}
	}

	// Every policy is bound, enforcing, and only for the leader.
	for _, name := range []string{"kerf-leader-writes", "kerf-leader-fields", "kerf-leader-webhook"} {
		var p admissionregistrationv1.ValidatingAdmissionPolicy
		kustomizetest.Object(t, objs, "ValidatingAdmissionPolicy", name, &p)
		require.Len(t, p.Spec.MatchConditions, 1)
		assert.Equal(t, "request.userInfo.username == '"+leaderSA+"'", p.Spec.MatchConditions[0].Expression)
		assert.Equal(t, admissionregistrationv1.Fail, *p.Spec.FailurePolicy)
		var b admissionregistrationv1.ValidatingAdmissionPolicyBinding
		kustomizetest.Object(t, objs, "ValidatingAdmissionPolicyBinding", name, &b)
		assert.Equal(t, name, b.Spec.PolicyName)
		assert.Equal(t, []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}, b.Spec.ValidationActions)
	}
}

// TestTheLeaderAuthenticatesTheWebhooksCallers: the leader's Deployment
// gives the webhook a client CA from a mounted volume (the cluster's CA,
// kube-root-ca.crt) and the apiserver's name, and does not serve anyone.
func TestTheLeaderAuthenticatesTheWebhooksCallers(t *testing.T) {
	var dep appsv1.Deployment
	kustomizetest.Object(t, kustomizetest.Objects(t, kustomizetest.Manifests(t)), "Deployment", "kerf-leader", &dep)
	spec := dep.Spec.Template.Spec
	args := spec.Containers[0].Args
	assert.NotContains(t, args, "--webhook-allow-unauthenticated")
	assert.Equal(t, webhook.DefaultClientName, flagValue(t, args, "--webhook-client-name"))
	ca := flagValue(t, args, "--webhook-client-ca")
	var mounted bool
	for _, m := range spec.Containers[0].VolumeMounts {
		if strings.HasPrefix(ca, m.MountPath+"/") {
			i := slices.IndexFunc(spec.Volumes, func(v corev1.Volume) bool { return v.Name == m.Name })
			require.GreaterOrEqual(t, i, 0, "volume %s", m.Name)
			require.NotNil(t, spec.Volumes[i].ConfigMap, "volume %s", m.Name)
			assert.Equal(t, "kube-root-ca.crt", spec.Volumes[i].ConfigMap.Name)
			assert.Equal(t, m.MountPath+"/ca.crt", ca, "kube-root-ca.crt's key is ca.crt")
			mounted = true
		}
	}
	assert.True(t, mounted, "--webhook-client-ca %s is on a mounted volume", ca)
}

// TestARealLeaderAsItsServiceAccountAppliesAChange runs a kerf-leader
// replica (cluster.New, as cmd/kerf-leader builds it) as its service
// account, its token bound to its pod, with vap.yaml enforced: it takes the
// Lease, labels its own pod and clears a former leader's label, and applies
// a Rollout with HPA coordination, recording it in the recommendation's
// status, all through the policies.
func TestARealLeaderAsItsServiceAccountAppliesAChange(t *testing.T) {
	w := setUpPolicyWorld(t)
	cp := controlplane.Get(t)
	ctx := context.Background()
	admin := cp.Client
	require.NoError(t, admin.Create(ctx, &v1alpha1.RightsizingPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: "guard"}}))
	rsr := &v1alpha1.RightsizingRecommendation{
		ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: "web"},
		Spec: v1alpha1.RightsizingRecommendationSpec{
			TargetRef: v1alpha1.TargetRef{APIVersion: "apps/v1", Kind: v1alpha1.KindDeployment, Name: "web"},
			Strategy:  v1alpha1.StrategyRollout,
			HPA:       &v1alpha1.HPACoordination{Coordinate: true},
			Containers: []v1alpha1.ContainerResources{{Name: "app",
				Requests: &v1alpha1.ResourceValues{CPU: ptr.To(resource.MustParse("250m"))},
				Limits:   &v1alpha1.ResourceValues{CPU: ptr.To(resource.MustParse("250m"))}}},
		},
	}
	require.NoError(t, admin.Create(ctx, rsr))

	cfg := rest.CopyConfig(cp.Config)
	cfg.Impersonate = rest.ImpersonationConfig{
		UserName: leaderSA,
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:" + namespace, "system:authenticated"},
		Extra:    map[string][]string{"authentication.kubernetes.io/pod-name": {leaderPod}},
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if testing.Verbose() {
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	l, err := cluster.New(cluster.Config{Namespace: namespace, LeaseName: "kerf-leader", Identity: leaderPod, PodName: leaderPod,
		WatchNamespaces: []string{namespace, w.ns}, Registry: prometheus.NewRegistry(), Signals: signals.New(),
		LeaseDuration: 3 * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: 200 * time.Millisecond}, cfg, log)
	require.NoError(t, err)
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- l.Run(runCtx) }()
	t.Cleanup(func() { stop(); <-done })

	require.Eventually(t, func() bool {
		var got v1alpha1.RightsizingRecommendation
		if admin.Get(ctx, client.ObjectKeyFromObject(rsr), &got) != nil {
			return false
		}
		for _, c := range got.Status.Conditions {
			if c.Type == v1alpha1.ConditionApplied && c.Status == metav1.ConditionTrue {
				return true
			}
		}
		return false
	}, 60*time.Second, 100*time.Millisecond, "the leader never applied the change as its service account")

	var dep appsv1.Deployment
	require.NoError(t, admin.Get(ctx, client.ObjectKey{Namespace: w.ns, Name: "web"}, &dep))
	assert.Equal(t, "250m", dep.Spec.Template.Spec.Containers[0].Resources.Requests.Cpu().String())
	var hpa autoscalingv2.HorizontalPodAutoscaler
	require.NoError(t, admin.Get(ctx, client.ObjectKey{Namespace: w.ns, Name: "web"}, &hpa))
	assert.NotEqual(t, int32(60), *hpa.Spec.Metrics[1].Resource.Target.AverageUtilization, "the HPA target moved")
	require.Eventually(t, func() bool {
		var own, former corev1.Pod
		return admin.Get(ctx, client.ObjectKey{Namespace: namespace, Name: leaderPod}, &own) == nil &&
			admin.Get(ctx, client.ObjectKey{Namespace: namespace, Name: "kerf-leader-former"}, &former) == nil &&
			own.Labels[cluster.LeaderPodLabel] == "true" && former.Labels[cluster.LeaderPodLabel] == ""
	}, 30*time.Second, 100*time.Millisecond, "the leader labels its own pod and clears the former leader's")
}

// TestTheLeaderMayChangeOnlyTheWebhooksCABundle attacks the webhook
// configuration with kerf-leader's token (issue 30, item 1): before,
// kerf-leader-writes checked only the operation and the name, so the
// token could point MutatingWebhookConfiguration kerf at a server of its
// own for every namespace, or make it fail closed and stop every pod
// creation. Now only webhooks[*].clientConfig.caBundle may change, which
// the leader's own cert.PatchCABundle still does.
func TestTheLeaderMayChangeOnlyTheWebhooksCABundle(t *testing.T) {
	w := setUpPolicyWorld(t)
	ctx := context.Background()
	update := func(mutate func(*admissionregistrationv1.MutatingWebhookConfiguration)) error {
		var cfg admissionregistrationv1.MutatingWebhookConfiguration
		if err := w.c.Get(ctx, client.ObjectKey{Name: "kerf"}, &cfg); err != nil {
			return err
		}
		mutate(&cfg)
		return w.c.Update(ctx, &cfg)
	}
	require.NoError(t, cert.PatchCABundle(ctx, w.c, "kerf", selfSignedCA(t)), "the leader publishes its webhook CA")

	const refused = "may change only webhooks[*].clientConfig.caBundle of MutatingWebhookConfiguration kerf"
	for _, tc := range []struct {
		name   string
		mutate func(*admissionregistrationv1.MutatingWebhookConfiguration)
	}{
		{"failurePolicy Fail: no pod starts while the webhook is down", func(c *admissionregistrationv1.MutatingWebhookConfiguration) {
			c.Webhooks[0].FailurePolicy = ptr.To(admissionregistrationv1.Fail)
		}},
		{"an empty namespaceSelector: every namespace's pods, kube-system's too", func(c *admissionregistrationv1.MutatingWebhookConfiguration) {
			c.Webhooks[0].NamespaceSelector = &metav1.LabelSelector{}
		}},
		{"a URL elsewhere", func(c *admissionregistrationv1.MutatingWebhookConfiguration) {
			c.Webhooks[0].ClientConfig.Service = nil
			c.Webhooks[0].ClientConfig.URL = ptr.To("https://attacker.example:8443/mutate")
		}},
		{"more resources: Secrets", func(c *admissionregistrationv1.MutatingWebhookConfiguration) {
			c.Webhooks[0].Rules[0].Resources = append(c.Webhooks[0].Rules[0].Resources, "secrets")
		}},
		{"a second webhook", func(c *admissionregistrationv1.MutatingWebhookConfiguration) {
			extra := *c.Webhooks[0].DeepCopy()
			extra.Name = "evil.kerf.dev"
			c.Webhooks = append(c.Webhooks, extra)
		}},
		{"a label", func(c *admissionregistrationv1.MutatingWebhookConfiguration) {
			c.Labels = map[string]string{"example.com/x": "1"}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := update(tc.mutate)
			require.Error(t, err, "refused")
			assert.True(t, apierrors.IsForbidden(err) || apierrors.IsInvalid(err), "a refusal, not %v", err)
			assert.Contains(t, err.Error(), "ValidatingAdmissionPolicy", "refused by a policy, not by RBAC")
			assert.Contains(t, err.Error(), refused)
		})
	}
}

// selfSignedCA returns the PEM of a new self-signed CA certificate.
func selfSignedCA(t *testing.T) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "kerf-vap-test"},
		NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}
