package workload

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/kerf-dev/kerf/api/v1alpha1"
)

const ns = "apps"

var webLabels = map[string]string{"app": "web"}

func newClient(t *testing.T, objs ...client.Object) client.Client {
	t.Helper()
	scheme := runtime.NewScheme()
	require.NoError(t, clientgoscheme.AddToScheme(scheme))
	return fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).Build()
}

func meta(name string, uid types.UID, owner client.Object, kind string) metav1.ObjectMeta {
	m := metav1.ObjectMeta{Namespace: ns, Name: name, UID: uid, Labels: map[string]string{"app": "web"}}
	if owner != nil {
		m.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: kind, Name: owner.GetName(), UID: owner.GetUID(), Controller: ptr.To(true)}}
	}
	return m
}

func template(image string) corev1.PodTemplateSpec {
	return corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: webLabels},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: image}}},
	}
}

func TestNewObjectAcceptsTheManagedKindsOnly(t *testing.T) {
	cases := []struct {
		ref  v1alpha1.TargetRef
		want client.Object
	}{
		{v1alpha1.TargetRef{Kind: v1alpha1.KindDeployment, Name: "x"}, &appsv1.Deployment{}},
		{v1alpha1.TargetRef{APIVersion: "apps/v1", Kind: v1alpha1.KindStatefulSet, Name: "x"}, &appsv1.StatefulSet{}},
		{v1alpha1.TargetRef{Kind: v1alpha1.KindDaemonSet, Name: "x"}, &appsv1.DaemonSet{}},
		{v1alpha1.TargetRef{Kind: "ReplicaSet", Name: "x"}, nil},
		{v1alpha1.TargetRef{APIVersion: "extensions/v1beta1", Kind: v1alpha1.KindDeployment, Name: "x"}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.ref.APIVersion+"/"+string(tc.ref.Kind), func(t *testing.T) {
			got, err := newObject(tc.ref)
			if tc.want == nil {
				require.ErrorIs(t, err, ErrUnsupportedKind)
				return
			}
			require.NoError(t, err)
			assert.IsType(t, tc.want, got)
		})
	}
	_, err := From(&appsv1.ReplicaSet{})
	require.ErrorIs(t, err, ErrUnsupportedKind)
}

func TestFromReadsTheSpecOfEachKind(t *testing.T) {
	sel := &metav1.LabelSelector{MatchLabels: webLabels}
	cases := []struct {
		name     string
		obj      client.Object
		kind     v1alpha1.WorkloadKind
		strategy string
		onDelete bool
	}{
		{"Deployment rolling", &appsv1.Deployment{Spec: appsv1.DeploymentSpec{Selector: sel, Template: template("a"),
			Strategy: appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType}}}, v1alpha1.KindDeployment, "RollingUpdate", false},
		{"Deployment recreate", &appsv1.Deployment{Spec: appsv1.DeploymentSpec{Selector: sel, Template: template("a"),
			Strategy: appsv1.DeploymentStrategy{Type: appsv1.RecreateDeploymentStrategyType}}}, v1alpha1.KindDeployment, "Recreate", false},
		{"StatefulSet OnDelete", &appsv1.StatefulSet{Spec: appsv1.StatefulSetSpec{Selector: sel, Template: template("a"),
			UpdateStrategy: appsv1.StatefulSetUpdateStrategy{Type: appsv1.OnDeleteStatefulSetStrategyType}}}, v1alpha1.KindStatefulSet, "OnDelete", true},
		{"StatefulSet defaulted", &appsv1.StatefulSet{Spec: appsv1.StatefulSetSpec{Selector: sel, Template: template("a")}}, v1alpha1.KindStatefulSet, "", false},
		{"DaemonSet OnDelete", &appsv1.DaemonSet{Spec: appsv1.DaemonSetSpec{Selector: sel, Template: template("a"),
			UpdateStrategy: appsv1.DaemonSetUpdateStrategy{Type: appsv1.OnDeleteDaemonSetStrategyType}}}, v1alpha1.KindDaemonSet, "OnDelete", true},
		{"DaemonSet rolling", &appsv1.DaemonSet{Spec: appsv1.DaemonSetSpec{Selector: sel, Template: template("a"),
			UpdateStrategy: appsv1.DaemonSetUpdateStrategy{Type: appsv1.RollingUpdateDaemonSetStrategyType}}}, v1alpha1.KindDaemonSet, "RollingUpdate", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w, err := From(tc.obj)
			require.NoError(t, err)
			assert.Equal(t, tc.kind, w.Kind)
			assert.Same(t, tc.obj, w.Object)
			assert.Equal(t, sel, w.Selector)
			assert.Equal(t, tc.strategy, w.UpdateStrategy)
			assert.Equal(t, tc.onDelete, w.OnDelete())
			w.Template.Spec.Containers[0].Image = "changed"
			again, err := From(tc.obj)
			require.NoError(t, err)
			assert.Equal(t, "changed", again.Template.Spec.Containers[0].Image, "Template points into the object")
		})
	}
}

func TestGetReadsByTargetRef(t *testing.T) {
	d := &appsv1.Deployment{ObjectMeta: meta("web", "d1", nil, ""), Spec: appsv1.DeploymentSpec{
		Selector: &metav1.LabelSelector{MatchLabels: webLabels}, Template: template("a")}}
	c := newClient(t, d)
	w, err := Get(context.Background(), c, ns, v1alpha1.TargetRef{Kind: v1alpha1.KindDeployment, Name: "web"})
	require.NoError(t, err)
	assert.Equal(t, "Deployment apps/web", w.String())
	var s Scratch
	for _, r := range []client.Client{c, Indexed(c)} {
		ws, err := GetWith(context.Background(), r, ns, v1alpha1.TargetRef{Kind: v1alpha1.KindDeployment, Name: "web"}, &s)
		require.NoError(t, err)
		assert.Equal(t, w.Object, ws.Object, "in a Scratch's room, the same object")
	}
	assert.Equal(t, "web", s.deployment.Name, "read into the Scratch from an Indexed reader")
	assert.True(t, IsIndexed(ReadOnly(Indexed(c))), "ReadOnly keeps the Indexed mark")
	assert.False(t, IsIndexed(ReadOnly(c)))
	_, err = GetWith(context.Background(), Indexed(c), ns, v1alpha1.TargetRef{Kind: "CronJob", Name: "web"}, &s)
	require.ErrorIs(t, err, ErrUnsupportedKind)

	_, err = Get(context.Background(), c, ns, v1alpha1.TargetRef{Kind: v1alpha1.KindStatefulSet, Name: "web"})
	require.Error(t, err)
	_, err = Get(context.Background(), c, ns, v1alpha1.TargetRef{Kind: "CronJob", Name: "web"})
	require.ErrorIs(t, err, ErrUnsupportedKind)
}

func TestRefTargets(t *testing.T) {
	ref := Ref{Kind: v1alpha1.KindDeployment, Namespace: ns, Name: "web"}
	cases := []struct {
		name   string
		ns     string
		target v1alpha1.TargetRef
		want   bool
	}{
		{"same", ns, v1alpha1.TargetRef{Kind: v1alpha1.KindDeployment, Name: "web"}, true},
		{"apps/v1 written", ns, v1alpha1.TargetRef{APIVersion: "apps/v1", Kind: v1alpha1.KindDeployment, Name: "web"}, true},
		{"another namespace", "other", v1alpha1.TargetRef{Kind: v1alpha1.KindDeployment, Name: "web"}, false},
		{"another kind", ns, v1alpha1.TargetRef{Kind: v1alpha1.KindStatefulSet, Name: "web"}, false},
		{"another name", ns, v1alpha1.TargetRef{Kind: v1alpha1.KindDeployment, Name: "db"}, false},
		{"another group", ns, v1alpha1.TargetRef{APIVersion: "example.com/v1", Kind: v1alpha1.KindDeployment, Name: "web"}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, ref.Targets(tc.ns, tc.target))
		})
	}
	assert.Equal(t, "Deployment/web", ref.String())
}

func TestOfFollowsTheControllerChain(t *testing.T) {
	d := &appsv1.Deployment{ObjectMeta: meta("web", "d1", nil, "")}
	rs := &appsv1.ReplicaSet{ObjectMeta: meta("web-1", "rs1", d, "Deployment")}
	orphan := &appsv1.ReplicaSet{ObjectMeta: meta("orphan", "rs2", nil, "")}
	sts := &appsv1.StatefulSet{ObjectMeta: meta("db", "s1", nil, "")}
	ds := &appsv1.DaemonSet{ObjectMeta: meta("agent", "ds1", nil, "")}
	job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "once", UID: "j1"}}
	c := newClient(t, d, rs, orphan)
	pod := func(owner client.Object, kind string) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: meta("p", "p1", owner, kind)}
		if kind == "Job" {
			p.OwnerReferences[0].APIVersion = "batch/v1"
		}
		return p
	}
	otherUID := pod(rs, "ReplicaSet")
	otherUID.OwnerReferences[0].UID = "rs-old"
	cases := []struct {
		name     string
		pod      *corev1.Pod
		want     Ref
		ok       bool
		notFound bool
	}{
		{"a bare pod", pod(nil, ""), Ref{}, false, false},
		{"a Deployment's", pod(rs, "ReplicaSet"), Ref{v1alpha1.KindDeployment, ns, "web"}, true, false},
		{"a StatefulSet's", pod(sts, "StatefulSet"), Ref{v1alpha1.KindStatefulSet, ns, "db"}, true, false},
		{"a DaemonSet's", pod(ds, "DaemonSet"), Ref{v1alpha1.KindDaemonSet, ns, "agent"}, true, false},
		{"a Job's", pod(job, "Job"), Ref{}, false, false},
		{"a ReplicaSet no Deployment controls", pod(orphan, "ReplicaSet"), Ref{}, false, false},
		{"a ReplicaSet not found", pod(&appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: "gone", UID: "x"}}, "ReplicaSet"), Ref{}, false, true},
		{"a ReplicaSet of the same name, another UID", otherUID, Ref{}, false, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, ok, err := Of(context.Background(), c, tc.pod)
			if tc.notFound {
				require.ErrorIs(t, err, ErrReplicaSetNotFound)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.ok, ok)
			assert.Equal(t, tc.want, got)
		})
	}
}

// TestPodsAreTheOwnedOnes checks both views of a Deployment's pods in the
// middle of a rollout: Pods has those of every ReplicaSet it controls, in
// any phase; RunningPods those of its current ReplicaSet that run and are
// not being deleted. A pod the selector selects but another controller
// owns is in neither.
//
// It runs on a reader with the controller index (Indexed, as the leader's
// cache) and on one without (listed by selector): both give the same pods.
func TestPodsAreTheOwnedOnes(t *testing.T) {
	t.Run("by selector", func(t *testing.T) { testPodsAreTheOwnedOnes(t, newClient) })
	t.Run("by controller index", func(t *testing.T) { testPodsAreTheOwnedOnes(t, newIndexedClient) })
}

// newIndexedClient is newClient with IndexFields' index, marked Indexed.
// TestMetaWithReadsTheMetadataAlone: MetaWith reads a workload's
// metadata (its labels and UID, which resolve its policy) as a
// PartialObjectMetadata of its kind, in a Scratch's room from an Indexed
// reader, and refuses a kind Kerf does not manage.
func TestMetaWithReadsTheMetadataAlone(t *testing.T) {
	ctx := context.Background()
	sts := &appsv1.StatefulSet{ObjectMeta: meta("db", "s1", nil, "")}
	c := newClient(t, sts)
	var s Scratch
	for _, r := range []client.Client{c, Indexed(c)} {
		m, err := MetaWith(ctx, r, ns, v1alpha1.TargetRef{Kind: v1alpha1.KindStatefulSet, Name: "db"}, &s)
		require.NoError(t, err)
		assert.Equal(t, types.UID("s1"), m.UID)
		assert.Equal(t, webLabels, m.Labels)
		assert.Equal(t, appsv1.SchemeGroupVersion.WithKind("StatefulSet"), m.GroupVersionKind())
		assert.Equal(t, IsIndexed(r), m == &s.meta, "in the Scratch's room from an Indexed reader only")
	}
	_, err := MetaWith(ctx, c, ns, v1alpha1.TargetRef{Kind: v1alpha1.KindDeployment, Name: "db"}, &s)
	require.Error(t, err, "no Deployment db")
	_, err = MetaWith(ctx, c, ns, v1alpha1.TargetRef{Kind: "CronJob", Name: "db"}, &s)
	require.ErrorIs(t, err, ErrUnsupportedKind)
}

func newIndexedClient(t *testing.T, objs ...client.Object) client.Client {
	t.Helper()
	scheme := runtime.NewScheme()
	require.NoError(t, clientgoscheme.AddToScheme(scheme))
	return Indexed(fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).
		WithIndex(&corev1.Pod{}, ControllerIndex, controllerUID).
		WithIndex(&appsv1.ReplicaSet{}, ControllerIndex, controllerUID).Build())
}

func testPodsAreTheOwnedOnes(t *testing.T, newClient func(*testing.T, ...client.Object) client.Client) {
	d := &appsv1.Deployment{ObjectMeta: meta("web", "d1", nil, ""), Spec: appsv1.DeploymentSpec{
		Selector: &metav1.LabelSelector{MatchLabels: webLabels}, Template: template("new")}}
	current := &appsv1.ReplicaSet{ObjectMeta: meta("web-new", "rs-new", d, "Deployment"), Spec: appsv1.ReplicaSetSpec{
		Selector: &metav1.LabelSelector{MatchLabels: webLabels}, Template: template("new")}}
	current.Spec.Template.Labels = map[string]string{"app": "web", appsv1.DefaultDeploymentUniqueLabelKey: "abc"}
	current.Annotations = map[string]string{revisionAnnotation: "1"}
	old := &appsv1.ReplicaSet{ObjectMeta: meta("web-old", "rs-old", d, "Deployment"), Spec: appsv1.ReplicaSetSpec{
		Selector: &metav1.LabelSelector{MatchLabels: webLabels}, Template: template("old")}}
	old.Annotations = map[string]string{revisionAnnotation: "2"}
	other := &appsv1.StatefulSet{ObjectMeta: meta("other", "s1", nil, "")}
	pod := func(name string, owner client.Object, kind string, phase corev1.PodPhase, opts ...func(*corev1.Pod)) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: meta(name, types.UID(name), owner, kind), Status: corev1.PodStatus{Phase: phase}}
		for _, o := range opts {
			o(p)
		}
		return p
	}
	deleting := func(p *corev1.Pod) {
		p.DeletionTimestamp = ptr.To(metav1.Now())
		p.Finalizers = []string{"test/keep"}
	}
	c := newClient(t, d, current, old, other,
		pod("b-new-running", current, "ReplicaSet", corev1.PodRunning),
		pod("a-new-running", current, "ReplicaSet", corev1.PodRunning),
		pod("c-new-pending", current, "ReplicaSet", corev1.PodPending),
		pod("d-new-deleting", current, "ReplicaSet", corev1.PodRunning, deleting),
		pod("e-old-running", old, "ReplicaSet", corev1.PodRunning),
		pod("f-foreign", other, "StatefulSet", corev1.PodRunning),
		pod("g-bare", nil, "", corev1.PodRunning),
		// Owned, but relabelled out of the selector (as to quarantine it).
		pod("h-new-relabelled", current, "ReplicaSet", corev1.PodRunning, func(p *corev1.Pod) { p.Labels = map[string]string{"app": "debug"} }),
	)
	w, err := From(d)
	require.NoError(t, err)
	ctx := context.Background()

	rs, err := currentReplicaSet(ctx, c, w)
	require.NoError(t, err)
	require.NotNil(t, rs)
	assert.Equal(t, "web-new", rs.Name, "the template decides, not the revision, ignoring pod-template-hash")

	pods, err := Pods(ctx, c, w)
	require.NoError(t, err)
	assert.Equal(t, []string{"a-new-running", "b-new-running", "c-new-pending", "d-new-deleting", "e-old-running"}, names(pods))
	var s Scratch
	for range 2 { // the second in the room of the first
		withScratch, err := PodsWith(ctx, c, w, &s)
		require.NoError(t, err)
		assert.Equal(t, pods, withScratch, "in a Scratch's room, the same pods")
	}

	running, err := RunningPods(ctx, c, w)
	require.NoError(t, err)
	assert.Equal(t, []string{"a-new-running", "b-new-running"}, names(running))

	// Without a ReplicaSet of the Deployment's template, the highest
	// revision is current.
	d.Spec.Template = template("newer")
	rs, err = currentReplicaSet(ctx, c, w)
	require.NoError(t, err)
	assert.Equal(t, "web-old", rs.Name)

	sw, err := From(other)
	require.NoError(t, err)
	sw.Selector = &metav1.LabelSelector{MatchLabels: webLabels}
	pods, err = Pods(ctx, c, sw)
	require.NoError(t, err)
	assert.Equal(t, []string{"f-foreign"}, names(pods))
	rs, err = currentReplicaSet(ctx, c, sw)
	require.NoError(t, err)
	assert.Nil(t, rs, "a StatefulSet has no ReplicaSet")

	sw.Selector = &metav1.LabelSelector{}
	pods, err = Pods(ctx, c, sw)
	require.NoError(t, err)
	assert.Empty(t, pods, "an empty selector selects none")
}

func names(pods []corev1.Pod) []string {
	out := make([]string, 0, len(pods))
	for _, p := range pods {
		out = append(out, p.Name)
	}
	return out
}

// TestAScratchKeepsABoundedRoom: a Scratch keeps the room of a workload's
// lists up to maxScratchItems items, and none past it.
func TestAScratchKeepsABoundedRoom(t *testing.T) {
	assert.Len(t, keptRoom(make([]corev1.Pod, 3, maxScratchItems)), 3)
	assert.Nil(t, keptRoom(make([]corev1.Pod, 3, maxScratchItems+1)), "a larger room is not kept")
}

// TestReplicaSetMetaOfFindsADeploymentsPods: a pod's workload found
// through its ReplicaSet's metadata alone is the Deployment, the metadata
// read in a Scratch's room from an Indexed reader; a ReplicaSet that is
// not there is ErrReplicaSetNotFound.
func TestReplicaSetMetaOfFindsADeploymentsPods(t *testing.T) {
	ctx := context.Background()
	d := &appsv1.Deployment{ObjectMeta: meta("web", "d1", nil, "")}
	rs := &appsv1.ReplicaSet{ObjectMeta: meta("web-1", "rs1", d, "Deployment")}
	pod := &corev1.Pod{ObjectMeta: meta("web-1-a", "p1", rs, "ReplicaSet")}
	orphan := &corev1.Pod{ObjectMeta: meta("web-2-a", "p2", &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: "web-2", UID: "rs2"}}, "ReplicaSet")}
	c := newClient(t, d, rs)
	var s Scratch
	for _, r := range []client.Client{c, Indexed(c)} {
		ref, ok, err := OfWith(ctx, pod, ReplicaSetMetaOf(r, &s))
		require.NoError(t, err)
		assert.True(t, ok)
		assert.Equal(t, Ref{v1alpha1.KindDeployment, ns, "web"}, ref)
		assert.Equal(t, IsIndexed(r), s.replicaSetMeta.Name == "web-1", "read into the Scratch from an Indexed reader only")
		_, _, err = OfWith(ctx, orphan, ReplicaSetMetaOf(r, &s))
		require.ErrorIs(t, err, ErrReplicaSetNotFound)
	}
}

// metaReader writes fixed metadata into the PartialObjectMetadata a Get
// is given, allocating nothing, as the leader's cache does for a view.
type metaReader struct {
	client.Client
	meta metav1.ObjectMeta
}

func (m metaReader) Get(_ context.Context, _ client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	pm := obj.(*metav1.PartialObjectMetadata)
	pm.ObjectMeta = m.meta
	return nil
}

// TestMetadataReadsInAScratchAllocateNothing: once the reader allocates
// nothing, a metadata read into a Scratch's room allocates nothing
// either, of a workload (MetaWith) or of a ReplicaSet
// (ReplicaSetMetaOf): the recommender makes one for every workload and
// pod each pass.
func TestMetadataReadsInAScratchAllocateNothing(t *testing.T) {
	ctx := context.Background()
	r := Indexed(metaReader{meta: meta("web", "d1", nil, "")})
	var s Scratch
	ref := v1alpha1.TargetRef{Kind: v1alpha1.KindDeployment, Name: "web"}
	rsOf := ReplicaSetMetaOf(r, &s)
	key := client.ObjectKey{Namespace: ns, Name: "web-1"}
	assert.Zero(t, testing.AllocsPerRun(100, func() {
		if _, err := MetaWith(ctx, r, ns, ref, &s); err != nil {
			t.Fatal(err)
		}
		if _, err := rsOf(ctx, key); err != nil {
			t.Fatal(err)
		}
	}))
	m, err := MetaWith(ctx, r, ns, ref, &s)
	require.NoError(t, err)
	assert.Equal(t, appsv1.SchemeGroupVersion.WithKind("Deployment"), m.GroupVersionKind())
	rs, err := rsOf(ctx, key)
	require.NoError(t, err)
	assert.Equal(t, appsv1.SchemeGroupVersion.WithKind("ReplicaSet"), rs.(*metav1.PartialObjectMetadata).GroupVersionKind())
}
