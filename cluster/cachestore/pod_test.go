package cachestore

import (
	"bytes"
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/randfill"

	"github.com/kerf-dev/kerf/internal/kube"
	"github.com/kerf-dev/kerf/test/controlplane"
	"github.com/kerf-dev/kerf/test/kubetest"
)

// wholePod is a pod with every part a cachedPod keeps and many it drops.
func wholePod() *corev1.Pod {
	res := func(cpu, mem string) corev1.ResourceRequirements {
		l := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(mem)}
		return corev1.ResourceRequirements{Requests: l, Limits: l.DeepCopy()}
	}
	resize := []corev1.ContainerResizePolicy{{ResourceName: corev1.ResourceMemory, RestartPolicy: corev1.RestartContainer}}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web-h1-0", UID: "u-1", ResourceVersion: "7", Generation: 2,
			Labels: map[string]string{"app": "web"}, Annotations: map[string]string{"a": "b"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-h1", UID: "rs-1", Controller: ptr.To(true)}}},
		Spec: corev1.PodSpec{
			NodeName: "node-1", ServiceAccountName: "web",
			Containers: []corev1.Container{{Name: "app", Image: "shop/web:1", Env: []corev1.EnvVar{{Name: "MODE", Value: "serve"}},
				Resources: res("500m", "256Mi"), ResizePolicy: resize, TerminationMessagePath: "/dev/termination-log",
				SecurityContext: &corev1.SecurityContext{RunAsNonRoot: ptr.To(true)}}},
			InitContainers: []corev1.Container{{Name: "proxy", Image: "shop/proxy:1", Resources: res("100m", "64Mi"),
				RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways)}},
			EphemeralContainers: []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "debug", Image: "busybox"}}},
			Resources:           &corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")}},
			Overhead:            corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("250m"), corev1.ResourceMemory: resource.MustParse("120Mi")},
			RuntimeClassName:    ptr.To("kata"),
			PriorityClassName:   "high",
			Affinity:            crossNamespaceAffinity(),
			Volumes:             []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
			Tolerations:         []corev1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpExists}},
			SecurityContext:     &corev1.PodSecurityContext{},
			DNSPolicy:           corev1.DNSClusterFirst, SchedulerName: "default-scheduler",
			TerminationGracePeriodSeconds: ptr.To[int64](30),
		},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, QOSClass: corev1.PodQOSBurstable, PodIP: "10.0.0.7",
			PodIPs: []corev1.PodIP{{IP: "10.0.0.7"}}, HostIP: "192.168.0.2", HostIPs: []corev1.HostIP{{IP: "192.168.0.2"}},
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue},
				{Type: corev1.PodScheduled, Status: corev1.ConditionTrue}, {Type: corev1.ContainersReady, Status: corev1.ConditionTrue},
				{Type: corev1.PodResizePending, Status: corev1.ConditionTrue, Reason: corev1.PodReasonInfeasible, Message: "no room"}},
			ContainerStatuses: []corev1.ContainerStatus{{Name: "app", RestartCount: 3, ContainerID: "containerd://1",
				Image: "shop/web:1", ImageID: "shop/web@sha256:1", User: &corev1.ContainerUser{Linux: &corev1.LinuxContainerUser{UID: 1000}},
				VolumeMounts:         []corev1.VolumeMountStatus{{Name: "data", MountPath: "/data"}},
				Resources:            &corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("256Mi")}},
				LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Reason: "OOMKilled", ExitCode: 137}}}}},
	}
}

// crossNamespaceAffinity is an anti-affinity to pods of other namespaces
// and a node affinity.
func crossNamespaceAffinity() *corev1.Affinity {
	return &corev1.Affinity{
		NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
			MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "zone", Operator: corev1.NodeSelectorOpIn, Values: []string{"a"}}}}}}},
		PodAntiAffinity: &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
			TopologyKey: "kubernetes.io/hostname", Namespaces: []string{"batch"}}}},
	}
}

// TestTheCacheKeepsAnAffinityOnlyWhereItNamesOtherNamespaces: a pod's or
// a Deployment template's affinity is kept when a term names other
// namespaces (a quota's CrossNamespacePodAffinity scope reads it), and
// dropped when its terms stay in the pod's namespace.
func TestTheCacheKeepsAnAffinityOnlyWhereItNamesOtherNamespaces(t *testing.T) {
	local := crossNamespaceAffinity()
	local.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution[0].Namespaces = nil
	for _, tc := range []struct {
		name     string
		affinity *corev1.Affinity
		kept     bool
	}{
		{"other namespaces", crossNamespaceAffinity(), true},
		{"its own namespace", local, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := wholePod()
			pod.Spec.Affinity = tc.affinity
			obj, err := Transform(pod)
			require.NoError(t, err)
			dep := kubetest.Deployment("shop", "web", "500m", "256Mi")
			dep.Spec.Template.Spec.Affinity, dep.Spec.Template.Spec.PriorityClassName = tc.affinity.DeepCopy(), "high"
			depObj, err := Transform(dep)
			require.NoError(t, err)
			for _, spec := range []corev1.PodSpec{obj.(runtime.Object).DeepCopyObject().(*corev1.Pod).Spec, depObj.(runtime.Object).DeepCopyObject().(*appsv1.Deployment).Spec.Template.Spec} {
				assert.Equal(t, "high", spec.PriorityClassName)
				if tc.kept {
					assert.Equal(t, crossNamespaceAffinity(), spec.Affinity)
				} else {
					assert.Nil(t, spec.Affinity)
				}
			}
		})
	}
}

// TestACachedPodReadsBackAsWhatItKept: a cached pod is read back (through
// DeepCopyObject, as the cache's reader reads) as a *corev1.Pod with its
// metadata, its status and what Kerf reads of its spec, and nothing else
// of the spec; the read is the reader's own (a write to it leaves the
// cached pod as it was); and the transform keeps a cached pod as it is (a
// resync hands it back).
func TestACachedPodReadsBackAsWhatItKept(t *testing.T) {
	whole := wholePod()
	obj, err := Transform(whole.DeepCopy())
	require.NoError(t, err)
	cached, ok := obj.(*cachedPod)
	require.True(t, ok, "the cache holds a %T", obj)
	again, err := Transform(cached)
	require.NoError(t, err)
	assert.Same(t, cached, again, "the transform is idempotent")

	read, ok := cached.DeepCopyObject().(*corev1.Pod)
	require.True(t, ok, "a read is a *corev1.Pod")
	assert.Equal(t, whole.ObjectMeta, read.ObjectMeta)
	assert.Equal(t, withoutUnreadStatus(whole.Status), read.Status, "its status without what nothing in Kerf reads")
	assert.Equal(t, []corev1.PodConditionType{corev1.PodScheduled, corev1.PodResizePending},
		[]corev1.PodConditionType{read.Status.Conditions[0].Type, read.Status.Conditions[1].Type}, "the conditions Kerf reads")
	assert.Empty(t, read.Status.ContainerStatuses[0].Image, "no container's image")
	assert.Empty(t, read.Status.PodIP, "nor the pod's IP")
	want := corev1.PodSpec{NodeName: "node-1", ServiceAccountName: "web",
		Containers: []corev1.Container{{Name: "app", Resources: whole.Spec.Containers[0].Resources, ResizePolicy: whole.Spec.Containers[0].ResizePolicy}},
		InitContainers: []corev1.Container{{Name: "proxy", Resources: whole.Spec.InitContainers[0].Resources,
			RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways)}},
		EphemeralContainers: []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "debug"}}},
		Resources:           whole.Spec.Resources,
		Overhead:            whole.Spec.Overhead, // the gates count it, as the kubelet does
		// A ResourceQuota's PriorityClass and CrossNamespacePodAffinity
		// scopes read them.
		PriorityClassName: "high",
		Affinity:          crossNamespaceAffinity(),
	}
	assert.Equal(t, want, read.Spec, "of the spec, what Kerf reads and nothing else")

	read.Labels["app"] = "changed"
	read.Spec.Containers[0].Resources.Limits[corev1.ResourceCPU] = resource.MustParse("2")
	read.Spec.Containers[0].ResizePolicy[0].RestartPolicy = corev1.NotRequired
	*read.Spec.InitContainers[0].RestartPolicy = "Never"
	read.Spec.Resources.Limits[corev1.ResourceMemory] = resource.MustParse("2Gi")
	read.Status.ContainerStatuses[0].RestartCount = 9
	again2 := cached.Pod()
	assert.Equal(t, whole.ObjectMeta, again2.ObjectMeta, "a write to a read leaves the cached pod's metadata")
	assert.Equal(t, withoutUnreadStatus(whole.Status), again2.Status, "its status")
	assert.Equal(t, want, again2.Spec, "and its spec")

	status, ok := PodStatus(cached)
	require.True(t, ok)
	assert.Equal(t, int32(3), status.ContainerStatuses[0].RestartCount, "the event handlers read the cached pod's status")
	_, ok = PodStatus(&corev1.Namespace{})
	assert.False(t, ok, "and nothing of another kind")
}

// TestCachedViewsHoldWhatACopyHolds: a view of a cached pod, ReplicaSet
// or Deployment (what a read with client.UnsafeDisableDeepCopy gets of the
// leader's cache) holds what a copy holds, and shares it with the cached
// object rather than copying it.
func TestCachedViewsHoldWhatACopyHolds(t *testing.T) {
	obj, err := Transform(wholePod())
	require.NoError(t, err)
	pod := obj.(*cachedPod)
	view, ok := pod.View().(*corev1.Pod)
	require.True(t, ok, "a view is a *corev1.Pod")
	assert.Equal(t, pod.Pod(), view)
	assert.Equal(t, reflect.ValueOf(pod.labels).UnsafePointer(), reflect.ValueOf(view.Labels).UnsafePointer(), "sharing the labels")
	assert.Equal(t, reflect.ValueOf(pod.status.containers).UnsafePointer(), reflect.ValueOf(view.Status.ContainerStatuses).UnsafePointer(), "and the status")

	dep := kubetest.Deployment("shop", "web", "500m", "256Mi")
	dep.UID, dep.Spec.Replicas = "d-1", ptr.To[int32](3)
	dep.Spec.Template.Spec.InitContainers = wholePod().Spec.InitContainers
	dep.Status = appsv1.DeploymentStatus{ObservedGeneration: 2, Replicas: 3, ReadyReplicas: 2}
	rs := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web-h1", UID: "rs-1", Labels: map[string]string{"app": "web"},
		OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(dep, appsv1.SchemeGroupVersion.WithKind("Deployment"))}},
		Spec: appsv1.ReplicaSetSpec{Selector: dep.Spec.Selector.DeepCopy(), Template: *dep.Spec.Template.DeepCopy()}}
	for _, whole := range []client.Object{dep, rs} {
		obj, err := Transform(whole)
		require.NoError(t, err)
		cached, ok := obj.(interface {
			DeepCopyObject() runtime.Object
			View() runtime.Object
		})
		require.True(t, ok, "%T has a view", obj)
		assert.Equal(t, cached.DeepCopyObject(), cached.View(), "the view of a %T holds what its copy holds", obj)
	}
}

// TestCachedPodsHoldLessThanStrippedPods: pods as the real apiserver
// defaults them (those of the scale benchmark: one container, Running),
// decoded from protobuf as the informer decodes them, hold far less heap
// as cached pods than as the stripped *corev1.Pod the cache held before
// (managed fields, volumes, env, probes and scheduling dropped, resource
// lists interned in both); the figures are logged (docs/performance.md).
func TestCachedPodsHoldLessThanStrippedPods(t *testing.T) {
	c := controlplane.Get(t).Client
	ns := kubetest.Namespace(t, c)
	ctx := context.Background()
	dep := kubetest.Deployment(ns, "w-00000", "100m", "256Mi")
	dep.Spec.Template.Spec.Containers[0].Image = "registry.k8s.io/pause:3.10"
	require.NoError(t, c.Create(ctx, dep))
	var live corev1.Pod
	require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(kubetest.RunningPod(t, c, dep)), &live))
	require.NotEmpty(t, live.Spec.Containers[0].TerminationMessagePath, "the apiserver defaulted the pod")

	const n = 3000
	ser := protobuf.NewSerializer(kube.Scheme, kube.Scheme)
	encode := func(status corev1.PodStatus) [][]byte {
		raw := make([][]byte, n)
		for i := range raw {
			p := live.DeepCopy()
			p.TypeMeta = metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"}
			p.Name, p.UID = fmt.Sprintf("w-%05d-h1-0", i), types.UID(fmt.Sprintf("p-%05d", i))
			p.Labels = map[string]string{"app": fmt.Sprintf("w-%05d", i)}
			p.Status = *status.DeepCopy()
			var buf bytes.Buffer
			require.NoError(t, ser.Encode(p, &buf))
			raw[i] = buf.Bytes()
		}
		return raw
	}
	raw := encode(live.Status)
	// stripped is the transform before cached pods: the pod kept as a
	// *corev1.Pod without what Kerf never reads.
	stripped := func(obj any) (any, error) {
		p := obj.(*corev1.Pod)
		p.ManagedFields = nil
		for _, cs := range [][]corev1.Container{p.Spec.Containers, p.Spec.InitContainers} {
			for i := range cs {
				c := &cs[i]
				c.Env, c.EnvFrom, c.VolumeMounts, c.VolumeDevices = nil, nil, nil, nil
				c.Command, c.Args, c.WorkingDir, c.Ports = nil, nil, "", nil
				c.LivenessProbe, c.ReadinessProbe, c.StartupProbe, c.Lifecycle = nil, nil, nil, nil
			}
		}
		p.Spec.Volumes, p.Spec.Affinity, p.Spec.Tolerations, p.Spec.TopologySpreadConstraints, p.Spec.HostAliases = nil, nil, nil, nil, nil
		internPod(p)
		return p, nil
	}
	before, now, objs2 := heldHeap(t, raw, stripped, Transform)
	t.Logf("%d pods, live heap: %.0f bytes a pod stripped, %.0f cached (%.0f %%)", n, float64(before)/n, float64(now)/n, 100*float64(now)/float64(before))
	assert.Less(t, float64(now), 0.75*float64(before), "a cached pod holds at least a quarter less than a stripped one")
	read := objs2[0].(*cachedPod).Pod()
	assert.Equal(t, withoutUnreadStatus(live.Status), read.Status)
	assert.Equal(t, live.Spec.Containers[0].Resources, read.Spec.Containers[0].Resources)

	// The status as a kubelet writes it: five conditions, the IPs, the
	// image and the service account token's volume mount.
	kubelet := kubeletStatus(live)
	before, now, objs2 = heldHeap(t, encode(kubelet), stripped, Transform)
	t.Logf("%d pods with a kubelet's status, live heap: %.0f bytes a pod stripped, %.0f cached (%.0f %%)", n, float64(before)/n, float64(now)/n, 100*float64(now)/float64(before))
	assert.Less(t, float64(now), 0.75*float64(before), "a cached pod holds at least a quarter less than a stripped one")
	assert.Equal(t, withoutUnreadStatus(kubelet), objs2[0].(*cachedPod).Pod().Status)
}

// kubeletStatus is the status a kubelet writes of pod, Running.
func kubeletStatus(pod corev1.Pod) corev1.PodStatus {
	now := metav1.Unix(metav1.Now().Unix(), 0) // as protobuf carries it
	var conds []corev1.PodCondition
	for _, typ := range []corev1.PodConditionType{"PodReadyToStartContainers", corev1.PodInitialized, corev1.PodReady,
		corev1.ContainersReady, corev1.PodScheduled} {
		conds = append(conds, corev1.PodCondition{Type: typ, Status: corev1.ConditionTrue, LastTransitionTime: now, ObservedGeneration: pod.Generation})
	}
	c := &pod.Spec.Containers[0]
	return corev1.PodStatus{Phase: corev1.PodRunning, ObservedGeneration: pod.Generation, Conditions: conds, QOSClass: corev1.PodQOSBurstable,
		HostIP: "10.128.0.17", HostIPs: []corev1.HostIP{{IP: "10.128.0.17"}}, PodIP: "10.244.3.41", PodIPs: []corev1.PodIP{{IP: "10.244.3.41"}},
		StartTime: &now, ContainerStatuses: []corev1.ContainerStatus{{Name: c.Name, Ready: true, Started: ptr.To(true),
			Image: c.Image, ImageID: c.Image + "@sha256:ee6521f290b2168b6e0935a181d4cff9be1ac3f505666ef0e3c98fae8199917a",
			ContainerID:        "containerd://5f0c4b2e8d1a9c3b7e6f4a2d1c0b9a8e7f6d5c4b3a2918171615141312111009",
			AllocatedResources: c.Resources.Requests.DeepCopy(), Resources: c.Resources.DeepCopy(),
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}},
			User:  &corev1.ContainerUser{Linux: &corev1.LinuxContainerUser{UID: 65535, GID: 65535, SupplementalGroups: []int64{65535}}},
			VolumeMounts: []corev1.VolumeMountStatus{{Name: "kube-api-access-x7k2q", MountPath: "/var/run/secrets/kubernetes.io/serviceaccount",
				ReadOnly: true, RecursiveReadOnly: ptr.To(corev1.RecursiveReadOnlyDisabled)}}}}}
}

// withoutUnreadStatus is st without what a cachedPod drops of a pod's
// status (cachedPodStatus), as this test lists it: the IPs, the nominated
// node, the resource claims, the volume health, the resize status, the
// conditions but
// PodScheduled and the resize's, and each container's image, user,
// volume mounts and device health.
func withoutUnreadStatus(st corev1.PodStatus) corev1.PodStatus {
	st = *st.DeepCopy()
	st.PodIP, st.PodIPs, st.HostIP, st.HostIPs, st.NominatedNodeName, st.Resize = "", nil, "", nil, "", ""
	st.ResourceClaimStatuses, st.ExtendedResourceClaimStatus, st.NodeAllocatableResourceClaimStatuses, st.VolumeHealth = nil, nil, nil, nil
	var conds []corev1.PodCondition
	for _, c := range st.Conditions {
		switch c.Type {
		case corev1.PodScheduled, corev1.PodResizePending, corev1.PodResizeInProgress:
			conds = append(conds, c)
		}
	}
	st.Conditions = conds
	for _, ss := range [][]corev1.ContainerStatus{st.ContainerStatuses, st.InitContainerStatuses, st.EphemeralContainerStatuses} {
		for i := range ss {
			ss[i].Image, ss[i].ImageID, ss[i].ContainerID, ss[i].User, ss[i].VolumeMounts, ss[i].AllocatedResourcesStatus = "", "", "", nil, nil, nil
		}
	}
	return st
}

// TestEveryPodStatusFieldIsKeptOrDropped: each field of a pod's status is
// either kept by a cachedPod or one withoutUnreadStatus drops, so that a
// field a new Kubernetes adds fails here until it is kept or dropped by a
// choice; and a status with every field set (random values) reads back
// from a cachedPod as withoutUnreadStatus leaves it.
func TestEveryPodStatusFieldIsKeptOrDropped(t *testing.T) {
	kept := []string{"ObservedGeneration", "Phase", "Conditions", "Message", "Reason", "StartTime", "InitContainerStatuses",
		"ContainerStatuses", "QOSClass", "EphemeralContainerStatuses", "AllocatedResources", "Resources"}
	dropped := []string{"NominatedNodeName", "HostIP", "HostIPs", "PodIP", "PodIPs", "ResourceClaimStatuses",
		"ExtendedResourceClaimStatus", "NodeAllocatableResourceClaimStatuses", "VolumeHealth", "Resize"}
	var fields []string
	for f := range reflect.TypeFor[corev1.PodStatus]().Fields() {
		fields = append(fields, f.Name)
	}
	assert.ElementsMatch(t, append(kept, dropped...), fields, "corev1.PodStatus's fields are each kept or dropped")

	f := randfill.NewWithSeed(1).NilChance(0).NumElements(2, 2)
	for range 20 {
		var st corev1.PodStatus
		f.Fill(&st)
		st.Conditions[1].Type = corev1.PodResizeInProgress
		p := wholePod()
		p.Status = *st.DeepCopy()
		obj, err := Transform(p)
		require.NoError(t, err)
		assert.Equal(t, withoutUnreadStatus(st), obj.(*cachedPod).Pod().Status)
	}
}

// TestKeptPodConditionsShareTheirStrings: the conditions a cached pod
// keeps hold one copy of each type, status and reason across pods, where
// each decoded pod holds its own.
func TestKeptPodConditionsShareTheirStrings(t *testing.T) {
	var kept [2]corev1.PodCondition
	for i := range kept {
		p := wholePod()
		for j := range p.Status.Conditions {
			c := &p.Status.Conditions[j]
			c.Type = corev1.PodConditionType(strings.Clone(string(c.Type)))
			c.Status = corev1.ConditionStatus(strings.Clone(string(c.Status)))
			c.Reason = strings.Clone(c.Reason)
		}
		obj, err := Transform(p)
		require.NoError(t, err)
		conds := obj.(*cachedPod).status.conditions
		require.Len(t, conds, 2, "PodScheduled and PodResizePending are kept")
		kept[i] = conds[1]
	}
	assert.Equal(t, unsafe.StringData(string(kept[0].Type)), unsafe.StringData(string(kept[1].Type)), "one type")
	assert.Equal(t, unsafe.StringData(string(kept[0].Status)), unsafe.StringData(string(kept[1].Status)), "one status")
	assert.Equal(t, unsafe.StringData(kept[0].Reason), unsafe.StringData(kept[1].Reason), "one reason")
}
