package recommender

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/cluster/policy"
	"github.com/kerf-dev/kerf/cluster/recommend"
	"github.com/kerf-dev/kerf/cluster/signals"
	"github.com/kerf-dev/kerf/cluster/workload"
	"github.com/kerf-dev/kerf/test/controlplane"
)

// TestAPassTimesEachOfItsSteps checks kerf_recommender_pass_seconds on a
// real apiserver: a pass with no policy enabling spec.recommend times
// policies and checkpoint only; once one does, a pass times each of its
// six steps once, and every pass its total.
func TestAPassTimesEachOfItsSteps(t *testing.T) {
	c := controlplane.Get(t).Client
	ns := namespace(t, c)
	// The pass lists the policies its reader shows: only the test's
	// namespace, as the leader's cache of --watch-namespaces does, so the
	// recommending policies other tests of the package leave count not.
	nc := client.NewNamespacedClient(c, ns)
	reg := prometheus.NewRegistry()
	r, err := New(nc, nc, []string{ns}, signals.New(), Config{}, nil, reg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	require.NoError(t, err)

	require.NoError(t, r.pass(t.Context()))
	assert.Equal(t, map[string]uint64{"policies": 1, "checkpoint": 1, "total": 1}, passSteps(t, reg), "nothing recommended for")

	p := &v1alpha1.RightsizingPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "recommend"}}
	p.Spec.Recommend = &v1alpha1.RecommendSpec{Enabled: true, Interval: &metav1.Duration{Duration: time.Second}}
	require.NoError(t, c.Create(t.Context(), p))
	t.Cleanup(func() { _ = c.Delete(context.Background(), p) })
	require.NoError(t, r.pass(t.Context()))
	assert.Equal(t, map[string]uint64{"policies": 2, "feed": 1, "throttling": 1, "prune": 1, "recommend": 1, "checkpoint": 2, "total": 2},
		passSteps(t, reg), "every step once more")
}

// podLists is a client that records the namespace of each list of pods.
type podLists struct {
	client.Client
	mu         sync.Mutex
	namespaces []string
}

func (p *podLists) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	if _, ok := list.(*corev1.PodList); ok {
		var lo client.ListOptions
		lo.ApplyOptions(opts)
		p.mu.Lock()
		p.namespaces = append(p.namespaces, lo.Namespace)
		p.mu.Unlock()
	}
	return p.Client.List(ctx, list, opts...)
}

// getOptions is a client that records, per type of object read, whether
// each Get asked for no copy.
type getOptions struct {
	client.Client
	mu     sync.Mutex
	noCopy map[string][]bool
}

func (g *getOptions) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	var o client.GetOptions
	o.ApplyOptions(opts)
	g.mu.Lock()
	kind := fmt.Sprintf("%T", obj)
	g.noCopy[kind] = append(g.noCopy[kind], o.UnsafeDisableDeepCopy != nil && *o.UnsafeDisableDeepCopy)
	g.mu.Unlock()
	return g.Client.Get(ctx, key, obj, opts...)
}

// TestAPassReadsWorkloadsWithoutCopies: the pass reads each workload's
// metadata to resolve its policy, and its object to recommend; it only
// reads them, so from the leader's cache it gets a view of the cache's
// own, not a copy (client.UnsafeDisableDeepCopy). A copy of every
// Deployment each pass was the largest part of the leader's garbage at
// 25,000 workloads, and a view of each the largest part of the pass's
// after. The reader stays Indexed when the client is.
func TestAPassReadsWorkloadsWithoutCopies(t *testing.T) {
	c := controlplane.Get(t).Client
	ns := namespace(t, c)
	ctx := t.Context()
	p := &v1alpha1.RightsizingPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "recommend"}}
	p.Spec.Recommend = &v1alpha1.RecommendSpec{Enabled: true}
	require.NoError(t, c.Create(ctx, p))
	t.Cleanup(func() { _ = c.Delete(context.Background(), p) })
	labels := map[string]string{"app": "web"}
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"}, Spec: appsv1.DeploymentSpec{
		Selector: &metav1.LabelSelector{MatchLabels: labels},
		Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}}}}}}
	require.NoError(t, c.Create(ctx, d))

	gets := &getOptions{Client: c, noCopy: map[string][]bool{}}
	r, err := New(gets, c, []string{ns}, signals.New(), Config{}, nil, prometheus.NewRegistry(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	require.NoError(t, err)
	pols, err := policy.Gatherer{Reader: c}.All(ctx)
	require.NoError(t, err)
	rw := r.resolve(ctx, pols, workload.Ref{Kind: v1alpha1.KindDeployment, Namespace: ns, Name: "web"})
	require.NotNil(t, rw, "the policy recommends for the Deployment")
	assert.Equal(t, d.UID, rw.uid)
	assert.Equal(t, map[string][]bool{"*v1.PartialObjectMetadata": {true}}, gets.noCopy, "the Deployment's metadata alone, read as a view")
	assert.False(t, workload.IsIndexed(r.views))

	indexed, err := New(workload.Indexed(c), c, []string{ns}, signals.New(), Config{}, nil, prometheus.NewRegistry(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	require.NoError(t, err)
	assert.True(t, workload.IsIndexed(indexed.views), "an Indexed client's views are Indexed")
}

// TestAPassReadsPodsOneNamespaceAtATime: a pass lists the pods of each
// namespace in turn, never the whole cluster's at once (those were most
// of what a pass held at 5,000 workloads), and still observes each step
// once, its time summed over the namespaces.
func TestAPassReadsPodsOneNamespaceAtATime(t *testing.T) {
	c := controlplane.Get(t).Client
	a, b := namespace(t, c), namespace(t, c)
	for _, ns := range []string{a, b} {
		p := &v1alpha1.RightsizingPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "recommend"}}
		p.Spec.Recommend = &v1alpha1.RecommendSpec{Enabled: true}
		require.NoError(t, c.Create(t.Context(), p))
	}
	lists := &podLists{Client: c}
	reg := prometheus.NewRegistry()
	r, err := New(lists, c, []string{a, b}, signals.New(), Config{}, nil, reg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	require.NoError(t, err)
	require.NoError(t, r.pass(t.Context()))
	assert.Equal(t, []string{a, b}, lists.namespaces, "one list of pods per namespace, in turn")
	steps := passSteps(t, reg)
	for _, step := range []string{"feed", "throttling", "recommend", "prune", "checkpoint", "total"} {
		assert.EqualValues(t, 1, steps[step], "step %s observed once a pass", step)
	}
}

// podRooms is a client that records, for each list of pods, the first
// item of the room the list arrived with (nil: none) and of the one it
// left.
type podRooms struct {
	client.Client
	arrived, left []*corev1.Pod
}

func (p *podRooms) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	pods, ok := list.(*corev1.PodList)
	if !ok {
		return p.Client.List(ctx, list, opts...)
	}
	first := func() *corev1.Pod {
		if cap(pods.Items) == 0 {
			return nil
		}
		return &pods.Items[:1][0]
	}
	p.arrived = append(p.arrived, first())
	err := p.Client.List(ctx, list, opts...)
	p.left = append(p.left, first())
	return err
}

// TestAPassListsPodsIntoTheRoomTheLastLeft: a pass lists a namespace's
// pods into the items the pass before listed into, for the leader's cache
// to write its views in (a new list each namespace was a tenth of what
// the leader allocated at 25,000 workloads), and clears them once it is
// done, so that they pin no pod. Room for more than maxPodRoom pods is not
// kept. The map of the workloads a namespace fed is made once too.
func TestAPassListsPodsIntoTheRoomTheLastLeft(t *testing.T) {
	c := controlplane.Get(t).Client
	ns := namespace(t, c)
	p := &v1alpha1.RightsizingPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "recommend"}}
	p.Spec.Recommend = &v1alpha1.RecommendSpec{Enabled: true}
	require.NoError(t, c.Create(t.Context(), p))
	for _, name := range []string{"a", "b"} {
		require.NoError(t, c.Create(t.Context(), &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}}}}))
	}
	rooms := &podRooms{Client: c}
	r, err := New(rooms, c, []string{ns}, signals.New(), Config{}, nil, prometheus.NewRegistry(), slog.New(slog.DiscardHandler))
	require.NoError(t, err)

	require.NoError(t, r.pass(t.Context()))
	fed := reflect.ValueOf(r.fed).UnsafePointer()
	require.NoError(t, r.pass(t.Context()))
	assert.Equal(t, fed, reflect.ValueOf(r.fed).UnsafePointer(), "the map of the workloads fed is the pass before's")
	require.Len(t, rooms.left, 2)
	require.NotNil(t, rooms.left[0], "the first pass listed two pods")
	assert.Nil(t, rooms.arrived[0], "the first pass had no room")
	assert.Same(t, rooms.left[0], rooms.arrived[1], "the second pass listed into the first's room")
	room := r.pods.Items[:cap(r.pods.Items)]
	assert.Len(t, room, 2, "the room kept for the next pass")
	for i := range room {
		assert.Zero(t, room[i], "item %d cleared after the pass", i)
	}

	r.pods.Items = make([]corev1.Pod, 0, maxPodRoom+1)
	r.releasePods()
	assert.Zero(t, cap(r.pods.Items), "room past maxPodRoom is not kept")
}

// passSteps is the count of observations of kerf_recommender_pass_seconds
// by step.
func passSteps(t *testing.T, reg *prometheus.Registry) map[string]uint64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	out := map[string]uint64{}
	for _, mf := range mfs {
		if mf.GetName() != "kerf_recommender_pass_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "step" {
					out[lp.GetValue()] = m.GetHistogram().GetSampleCount()
				}
			}
		}
	}
	return out
}

// TestFoldRunningKeepsTheHighestOfEveryPodsSpecAndStatus: what a pass
// keeps of a workload's pods once it lets them go is, per container and
// field, the highest of the specs (an InPlace resize changes them) and the
// kubelet's status (which lags a resize); a container in no spec falls
// back to the template.
func TestFoldRunningKeepsTheHighestOfEveryPodsSpecAndStatus(t *testing.T) {
	res := func(cpu, mem string) corev1.ResourceList {
		return corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(mem)}
	}
	pod := func(specCPU, statusCPU, mem string) *corev1.Pod {
		return &corev1.Pod{
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app",
				Resources: corev1.ResourceRequirements{Requests: res(specCPU, mem), Limits: res(specCPU, mem)}}}},
			Status: corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{
				{Name: "app", Resources: &corev1.ResourceRequirements{Requests: res(statusCPU, mem), Limits: res(statusCPU, mem)}},
				{Name: "gone", Resources: &corev1.ResourceRequirements{Requests: res("9", "9Gi")}},
			}},
		}
	}
	// Resized down to 200m in its spec, the kubelet still at 500m; the
	// other pod at 300m, with more memory.
	var running []runningContainer
	running = foldRunning(running, pod("200m", "500m", "128Mi"))
	running = foldRunning(running, pod("300m", "300m", "256Mi"))

	request, limit := runningResources(corev1.Container{Name: "app"}, running)
	want := recommend.Resources{CPUMilli: 500, MemoryBytes: 256 << 20}
	assert.Equal(t, want, request)
	assert.Equal(t, want, limit)

	tmpl := corev1.Container{Name: "gone", Resources: corev1.ResourceRequirements{Requests: res("100m", "64Mi")}}
	request, _ = runningResources(tmpl, running)
	assert.Equal(t, recommend.Resources{CPUMilli: 100, MemoryBytes: 64 << 20}, request,
		"a container in no running pod's spec reads the template, whatever a status says")
}

// TestCheckpointsAreWrittenOldestFirstWithoutAllocating: the due
// checkpoints are ordered by their last write, then namespace, kind and
// name, and ordering them allocates nothing (a key built per comparison
// was 5 % of what the leader allocated at 25,000 workloads).
func TestCheckpointsAreWrittenOldestFirstWithoutAllocating(t *testing.T) {
	r := &Loop{workloads: map[workload.Ref]*trackedWorkload{}}
	t0 := time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC)
	var due []workload.Ref
	for i := range 60 {
		ref := workload.Ref{Kind: v1alpha1.KindDeployment, Namespace: fmt.Sprintf("namespace-%d", i%3), Name: fmt.Sprintf("a-workload-named-at-length-%02d", i)}
		if i%2 == 1 {
			ref.Kind = v1alpha1.KindStatefulSet
		}
		tw := &trackedWorkload{}
		tw.ckpt.at = stampOf(t0.Add(time.Duration(i%4) * time.Minute))
		r.workloads[ref] = tw
		due = append(due, ref)
	}
	slices.SortFunc(due, r.oldestCheckpointFirst)
	for i := 1; i < len(due); i++ {
		a, b := due[i-1], due[i]
		key := func(ref workload.Ref) string {
			return fmt.Sprintf("%020d/%s/%s/%s", r.workloads[ref].ckpt.at.Time().UnixNano(), ref.Namespace, ref.Kind, ref.Name)
		}
		assert.Less(t, key(a), key(b), "%v before %v", a, b)
	}
	assert.Zero(t, testing.AllocsPerRun(20, func() {
		slices.Reverse(due)
		slices.SortFunc(due, r.oldestCheckpointFirst)
	}))
}

// TestARestartedHistoryClearsItsInstancesPeakWindows: when a workload's
// history restarts under a new model (adopt), each of its containers'
// memory peak window, kept per instance, is the old model's interval and
// is cleared when the instance is next fed; an instance of another
// workload keeps its own. The loop keeps no map from pods to workloads
// for it: the workload counts its restarts (gen).
func TestARestartedHistoryClearsItsInstancesPeakWindows(t *testing.T) {
	sig := signals.New()
	r, err := New(nil, nil, nil, sig, Config{}, nil, prometheus.NewRegistry(), slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	now := time.Date(2026, 12, 7, 8, 0, 0, 0, time.UTC)
	pods := map[string]*corev1.Pod{}
	tws := map[string]*trackedWorkload{}
	for _, name := range []string{"a", "b"} {
		pods[name] = &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name)},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app"}}}}
		tws[name] = &trackedWorkload{model: r.base}
	}
	feed := func(name string, at time.Time) recommend.PeakWindow {
		r.ingest(t.Context(), workload.Ref{Kind: v1alpha1.KindDeployment, Namespace: "ns", Name: name}, pods[name],
			pods[name].Spec.Containers[0], tws[name], &recommend.ContainerState{}, at)
		return r.instances[instanceKey{pods[name].UID, "app"}].peak
	}
	held := map[string]recommend.PeakWindow{}
	for _, name := range []string{"a", "b"} {
		sig.Usage.Add(signals.UsageSample{PodUID: pods[name].UID, Container: "app", At: now, CPU: time.Second, WorkingSet: 100 << 20})
		held[name] = feed(name, now)
		require.NotEqual(t, recommend.PeakWindow{}, held[name], "%s's peak window holds its reading", name)
	}
	tws["a"].gen++ // as adopt restarts a's history
	later := now.Add(10 * time.Second)
	assert.Equal(t, recommend.PeakWindow{}, feed("a", later), "a's window was the old model's")
	assert.Equal(t, held["b"], feed("b", later), "b's history did not restart")
	assert.Equal(t, recommend.PeakWindow{}, feed("a", later.Add(10*time.Second)), "cleared once: nothing read since")
}
