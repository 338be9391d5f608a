package apply_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/cluster/apply"
	kerfworkload "github.com/kerf-dev/kerf/cluster/workload"
	"github.com/kerf-dev/kerf/test/controlplane"
)

// nodeName is the node the tests' pods are bound to.
const nodeName = "node-1"

// TestMain shares one control plane among the package's tests
// (controlplane.Get): a start costs seconds. It has the tests' node.
func TestMain(m *testing.M) {
	controlplane.Main(m, controlplane.Hooks{Setup: func(cp *controlplane.ControlPlane) error { return createNode(context.Background(), cp) }})
}

// createNode registers a Linux node with 4 cpus and 8Gi allocatable: the
// apiserver's PodResizeValidator checks resizes against it.
func createNode(ctx context.Context, cp *controlplane.ControlPlane) error {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName, Labels: map[string]string{corev1.LabelOSStable: "linux"}}}
	if err := cp.Client.Create(ctx, node); err != nil {
		return fmt.Errorf("create node: %w", err)
	}
	capacity := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("4"),
		corev1.ResourceMemory: resource.MustParse("8Gi"),
		corev1.ResourcePods:   resource.MustParse("110"),
	}
	node.Status.Capacity, node.Status.Allocatable = capacity, capacity
	if err := cp.Client.Status().Update(ctx, node); err != nil {
		return fmt.Errorf("set node allocatable: %w", err)
	}
	return nil
}

// clock is an injected clock the tests move by hand.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
}

// t0 is the tests' start of time, whole seconds as the API stores times.
var t0 = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

// env is one test's namespace, clock and Applier.
type env struct {
	t       testing.TB
	ctx     context.Context
	cp      *controlplane.ControlPlane
	ns      string
	clock   *clock
	applier *apply.Applier
}

func newEnv(t testing.TB) *env {
	t.Helper()
	cp := controlplane.Get(t)
	e := &env{t: t, ctx: context.Background(), cp: cp, ns: controlplane.UniqueName("ns"), clock: &clock{now: t0}}
	require.NoError(t, cp.Client.Create(e.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: e.ns}}))
	e.applier = &apply.Applier{Client: cp.Client, Clientset: cp.Clientset, Now: e.clock.Now}
	return e
}

func q(s string) *resource.Quantity { return ptr.To(resource.MustParse(s)) }

func list(cpu, mem string) corev1.ResourceList {
	l := corev1.ResourceList{}
	if cpu != "" {
		l[corev1.ResourceCPU] = resource.MustParse(cpu)
	}
	if mem != "" {
		l[corev1.ResourceMemory] = resource.MustParse(mem)
	}
	return l
}

// appContainer is a Burstable container: 500m/256Mi requests, 1/512Mi limits.
func appContainer() corev1.Container {
	return corev1.Container{
		Name: "app", Image: "kerf.local/kerf-workload:dev",
		Resources: corev1.ResourceRequirements{Requests: list("500m", "256Mi"), Limits: list("1", "512Mi")},
	}
}

// sidecarContainer is a Burstable container: 100m/64Mi requests, 200m/128Mi limits.
func sidecarContainer() corev1.Container {
	return corev1.Container{
		Name: "sidecar", Image: "kerf.local/kerf-workload:dev",
		Resources: corev1.ResourceRequirements{Requests: list("100m", "64Mi"), Limits: list("200m", "128Mi")},
	}
}

// workload is a workload the test created, with the pods it runs.
type workload struct {
	obj  client.Object
	kind v1alpha1.WorkloadKind
	// owner is the pods' controller: the current ReplicaSet of a
	// Deployment, the workload itself otherwise.
	owner client.Object
	pods  []*corev1.Pod
}

// workloadOpts shape a workload.
type workloadOpts struct {
	containers []corev1.Container
	onDelete   bool
	pods       int
}

// createWorkload creates a workload of the kind and, since no
// controller-manager runs, what its controllers would: a Deployment's
// ReplicaSet (pod-template-hash label, ownerReference) and the pods, bound
// to the node and reported Running by a stand-in kubelet.
func (e *env) createWorkload(kind v1alpha1.WorkloadKind, name string, o workloadOpts) *workload {
	t := e.t
	if o.containers == nil {
		o.containers = []corev1.Container{appContainer(), sidecarContainer()}
	}
	if o.pods == 0 {
		o.pods = 2
	}
	labels := map[string]string{"app": name}
	tmpl := corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: labels},
		Spec:       corev1.PodSpec{Containers: o.containers},
	}
	sel := &metav1.LabelSelector{MatchLabels: labels}
	w := &workload{kind: kind}
	switch kind {
	case v1alpha1.KindDeployment:
		d := &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Namespace: e.ns, Name: name},
			Spec:       appsv1.DeploymentSpec{Replicas: ptr.To(int32(o.pods)), Selector: sel, Template: tmpl},
		}
		require.NoError(t, e.cp.Client.Create(e.ctx, d))
		w.obj = d
		w.owner = e.createReplicaSet(d, "5d8f9c7b6", "1")
	case v1alpha1.KindStatefulSet:
		s := &appsv1.StatefulSet{
			ObjectMeta: metav1.ObjectMeta{Namespace: e.ns, Name: name},
			Spec:       appsv1.StatefulSetSpec{Replicas: ptr.To(int32(o.pods)), Selector: sel, Template: tmpl, ServiceName: name},
		}
		if o.onDelete {
			s.Spec.UpdateStrategy.Type = appsv1.OnDeleteStatefulSetStrategyType
		}
		require.NoError(t, e.cp.Client.Create(e.ctx, s))
		w.obj, w.owner = s, s
	case v1alpha1.KindDaemonSet:
		d := &appsv1.DaemonSet{
			ObjectMeta: metav1.ObjectMeta{Namespace: e.ns, Name: name},
			Spec:       appsv1.DaemonSetSpec{Selector: sel, Template: tmpl},
		}
		if o.onDelete {
			d.Spec.UpdateStrategy.Type = appsv1.OnDeleteDaemonSetStrategyType
		}
		require.NoError(t, e.cp.Client.Create(e.ctx, d))
		w.obj, w.owner = d, d
	}
	for i := range o.pods {
		w.pods = append(w.pods, e.createPod(w.owner, fmt.Sprintf("%s-%d", name, i), true))
	}
	return w
}

// createReplicaSet creates the ReplicaSet the deployment controller would:
// the Deployment's template with a pod-template-hash label, controlled by
// the Deployment.
func (e *env) createReplicaSet(d *appsv1.Deployment, hash, revision string) *appsv1.ReplicaSet {
	tmpl := d.Spec.Template.DeepCopy()
	tmpl.Labels = map[string]string{appsv1.DefaultDeploymentUniqueLabelKey: hash}
	for k, v := range d.Spec.Template.Labels {
		tmpl.Labels[k] = v
	}
	sel := d.Spec.Selector.DeepCopy()
	sel.MatchLabels[appsv1.DefaultDeploymentUniqueLabelKey] = hash
	rs := &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: d.Namespace, Name: d.Name + "-" + hash, Labels: tmpl.Labels,
			Annotations:     map[string]string{"deployment.kubernetes.io/revision": revision},
			OwnerReferences: []metav1.OwnerReference{controllerRef(d, "Deployment")},
		},
		Spec: appsv1.ReplicaSetSpec{Replicas: d.Spec.Replicas, Selector: sel, Template: *tmpl},
	}
	require.NoError(e.t, e.cp.Client.Create(e.ctx, rs))
	return rs
}

func controllerRef(owner client.Object, kind string) metav1.OwnerReference {
	return metav1.OwnerReference{
		APIVersion: "apps/v1", Kind: kind, Name: owner.GetName(), UID: owner.GetUID(),
		Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true),
	}
}

func kindOf(obj client.Object) string {
	switch obj.(type) {
	case *appsv1.Deployment:
		return "Deployment"
	case *appsv1.ReplicaSet:
		return "ReplicaSet"
	case *appsv1.StatefulSet:
		return "StatefulSet"
	case *appsv1.DaemonSet:
		return "DaemonSet"
	}
	panic(fmt.Sprintf("no kind for %T", obj))
}

func templateOf(obj client.Object) *corev1.PodTemplateSpec {
	switch w := obj.(type) {
	case *appsv1.Deployment:
		return &w.Spec.Template
	case *appsv1.ReplicaSet:
		return &w.Spec.Template
	case *appsv1.StatefulSet:
		return &w.Spec.Template
	case *appsv1.DaemonSet:
		return &w.Spec.Template
	}
	panic(fmt.Sprintf("no template in %T", obj))
}

// createPod creates a pod of owner's template, bound to the node, and when
// running reports it Running as a kubelet would.
func (e *env) createPod(owner client.Object, name string, running bool) *corev1.Pod {
	tmpl := templateOf(owner)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: e.ns, Name: name, Labels: tmpl.Labels,
			OwnerReferences: []metav1.OwnerReference{controllerRef(owner, kindOf(owner))},
		},
		Spec: *tmpl.Spec.DeepCopy(),
	}
	pod.Spec.NodeName = nodeName
	require.NoError(e.t, e.cp.Client.Create(e.ctx, pod))
	if running {
		return e.kubeletReports(pod.Name)
	}
	return pod
}

// kubeletReports writes the pod's status as a kubelet that has actuated
// its spec would: Running, observed generation, container resources equal
// to the spec, and the given conditions (observed at the pod's generation
// unless they say otherwise).
func (e *env) kubeletReports(name string, conds ...corev1.PodCondition) *corev1.Pod {
	return e.kubeletStatus(name, func(pod *corev1.Pod) {
		for _, c := range conds {
			if c.ObservedGeneration == 0 {
				c.ObservedGeneration = pod.Generation
			}
			pod.Status.Conditions = append(pod.Status.Conditions, c)
		}
	})
}

// kubeletStatus writes the status kubeletReports describes, changed by
// mutate before it is written.
func (e *env) kubeletStatus(name string, mutate func(*corev1.Pod)) *corev1.Pod {
	t := e.t
	pod, err := e.cp.Clientset.CoreV1().Pods(e.ns).Get(e.ctx, name, metav1.GetOptions{})
	require.NoError(t, err)
	pod.Status.Phase = corev1.PodRunning
	pod.Status.ObservedGeneration = pod.Generation
	pod.Status.ContainerStatuses = nil
	for _, c := range pod.Spec.Containers {
		pod.Status.ContainerStatuses = append(pod.Status.ContainerStatuses, corev1.ContainerStatus{
			Name: c.Name, Image: c.Image, ImageID: "sha256:0123", ContainerID: "containerd://" + c.Name, Ready: true, Started: ptr.To(true),
			State:     corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(t0.Add(-time.Hour))}},
			Resources: c.Resources.DeepCopy(),
		})
	}
	pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(t0.Add(-time.Hour))}}
	mutate(pod)
	pod, err = e.cp.Clientset.CoreV1().Pods(e.ns).UpdateStatus(e.ctx, pod, metav1.UpdateOptions{})
	require.NoError(t, err)
	return pod
}

// running reads the recommendation's workload and the values it runs, as
// the leader does once a pass.
func (e *env) running(rsr *v1alpha1.RightsizingRecommendation) (*kerfworkload.Workload, []v1alpha1.ContainerResources, error) {
	e.t.Helper()
	w, err := kerfworkload.Get(e.ctx, e.cp.Client, rsr.Namespace, rsr.Spec.TargetRef)
	if err != nil {
		return nil, nil, err
	}
	current, err := e.applier.Running(e.ctx, w, rsr.Spec.Strategy)
	return w, current, err
}

// plan plans the recommendation's change from what its workload runs now.
func (e *env) plan(rsr *v1alpha1.RightsizingRecommendation) (*v1alpha1.Change, error) {
	e.t.Helper()
	w, current, err := e.running(rsr)
	if err != nil {
		return nil, err
	}
	return e.applier.Plan(e.ctx, rsr, w, current)
}

// planAndApply plans the recommendation's change and applies it, as the
// leader does, and returns the change.
func (e *env) planAndApply(rsr *v1alpha1.RightsizingRecommendation) *v1alpha1.Change {
	e.t.Helper()
	change, err := e.plan(rsr)
	require.NoError(e.t, err)
	_, err = e.applier.Apply(e.ctx, rsr, change)
	require.NoError(e.t, err)
	return change
}

// pod reads a pod back.
func (e *env) pod(name string) *corev1.Pod {
	p, err := e.cp.Clientset.CoreV1().Pods(e.ns).Get(e.ctx, name, metav1.GetOptions{})
	require.NoError(e.t, err)
	return p
}

// reread reads the workload back.
func (e *env) reread(obj client.Object) client.Object {
	out := obj.DeepCopyObject().(client.Object)
	require.NoError(e.t, e.cp.Client.Get(e.ctx, client.ObjectKeyFromObject(obj), out))
	return out
}

// rsr builds a recommendation (not stored: the Applier reads only what it
// is given) for the workload.
func (e *env) rsr(w *workload, strategy v1alpha1.Strategy, containers ...v1alpha1.ContainerResources) *v1alpha1.RightsizingRecommendation {
	return &v1alpha1.RightsizingRecommendation{
		ObjectMeta: metav1.ObjectMeta{Namespace: e.ns, Name: w.obj.GetName()},
		Spec: v1alpha1.RightsizingRecommendationSpec{
			TargetRef:  v1alpha1.TargetRef{APIVersion: "apps/v1", Kind: w.kind, Name: w.obj.GetName()},
			Strategy:   strategy,
			Containers: containers,
		},
	}
}

// values builds a container's recommended values; "" leaves a value out.
func values(name, reqCPU, reqMem, limCPU, limMem string) v1alpha1.ContainerResources {
	c := v1alpha1.ContainerResources{Name: name}
	rv := func(cpu, mem string) *v1alpha1.ResourceValues {
		if cpu == "" && mem == "" {
			return nil
		}
		v := &v1alpha1.ResourceValues{}
		if cpu != "" {
			v.CPU = q(cpu)
		}
		if mem != "" {
			v.Memory = q(mem)
		}
		return v
	}
	c.Requests, c.Limits = rv(reqCPU, reqMem), rv(limCPU, limMem)
	return c
}

// createHPA creates an autoscaling/v2 HPA of the workload with the metrics.
func (e *env) createHPA(name string, w *workload, metrics ...autoscalingv2.MetricSpec) *autoscalingv2.HorizontalPodAutoscaler {
	hpa := &autoscalingv2.HorizontalPodAutoscaler{
		ObjectMeta: metav1.ObjectMeta{Namespace: e.ns, Name: name},
		Spec: autoscalingv2.HorizontalPodAutoscalerSpec{
			ScaleTargetRef: autoscalingv2.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: string(w.kind), Name: w.obj.GetName()},
			MinReplicas:    ptr.To(int32(1)),
			MaxReplicas:    10,
			Metrics:        metrics,
		},
	}
	require.NoError(e.t, e.cp.Client.Create(e.ctx, hpa))
	return hpa
}

func cpuUtilization(percent int32) autoscalingv2.MetricSpec {
	return autoscalingv2.MetricSpec{
		Type: autoscalingv2.ResourceMetricSourceType,
		Resource: &autoscalingv2.ResourceMetricSource{
			Name:   corev1.ResourceCPU,
			Target: autoscalingv2.MetricTarget{Type: autoscalingv2.UtilizationMetricType, AverageUtilization: ptr.To(percent)},
		},
	}
}

func memoryAverageValue(v string) autoscalingv2.MetricSpec {
	return autoscalingv2.MetricSpec{
		Type: autoscalingv2.ResourceMetricSourceType,
		Resource: &autoscalingv2.ResourceMetricSource{
			Name:   corev1.ResourceMemory,
			Target: autoscalingv2.MetricTarget{Type: autoscalingv2.AverageValueMetricType, AverageValue: q(v)},
		},
	}
}

// hpaTarget reads the HPA's cpu utilization target back.
func (e *env) hpaTarget(name string) (int32, string) {
	hpa := &autoscalingv2.HorizontalPodAutoscaler{}
	require.NoError(e.t, e.cp.Client.Get(e.ctx, client.ObjectKey{Namespace: e.ns, Name: name}, hpa))
	for _, m := range hpa.Spec.Metrics {
		if m.Resource != nil && m.Resource.Name == corev1.ResourceCPU && m.Resource.Target.AverageUtilization != nil {
			return *m.Resource.Target.AverageUtilization, hpa.ResourceVersion
		}
	}
	e.t.Fatalf("HPA %s has no cpu utilization target", name)
	return 0, ""
}

// resources returns a container's resources in a pod spec.
func resourcesOf(spec *corev1.PodSpec, name string) corev1.ResourceRequirements {
	for _, c := range spec.Containers {
		if c.Name == name {
			return c.Resources
		}
	}
	panic("no container " + name)
}

// assertResources checks resource requirements semantically (250m = 0.25).
func assertResources(t *testing.T, want, got corev1.ResourceRequirements, msgAndArgs ...any) {
	t.Helper()
	if !apiequality.Semantic.DeepEqual(want, got) {
		assert.Fail(t, fmt.Sprintf("resources differ:\nwant requests=%v limits=%v\n got requests=%v limits=%v", want.Requests, want.Limits, got.Requests, got.Limits), msgAndArgs...)
	}
}

func requirements(reqCPU, reqMem, limCPU, limMem string) corev1.ResourceRequirements {
	return corev1.ResourceRequirements{Requests: list(reqCPU, reqMem), Limits: list(limCPU, limMem)}
}
