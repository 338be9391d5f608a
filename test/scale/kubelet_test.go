package scale

// The kubelet's part in an in-place resize, for the in-place workload's
// pods: no kubelet runs on test/controlplane, so the harness writes the
// pod status a kubelet writes once it has applied a resize (as KWOK
// does), and times what it sees.

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kerf-dev/kerf/test/controlplane"
)

// kubeletWriters is how many goroutines write the resized pods' status.
const kubeletWriters = 4

// resizeWatch follows the in-place workload's pods: when each one's spec
// first carries inPlaceMem (the leader's pods/resize reached the
// apiserver) and when the harness, as the kubelet, wrote the status that
// says the resize took hold.
type resizeWatch struct {
	mu     sync.Mutex
	seen   map[string]time.Time
	held   map[string]time.Time
	latest map[string]*corev1.Pod
	queued map[string]bool
	// stuck holds, by pod, the resourceVersion of a status the harness
	// wrote that the apiserver stored otherwise than written (needsKubelet
	// still): not written again until the pod changes, so that the
	// harness never loops.
	stuck map[string]string
	// writes and conflicts count the harness's status writes.
	writes, conflicts, failures int
	work                        chan string
}

// counts returns how many pods' specs carry the new memory and how many
// pods' status says the resize is done.
func (w *resizeWatch) counts() (seen, held int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.seen), len(w.held)
}

// writeCounts returns the harness's status writes, the conflicts and the
// other failures among them.
func (w *resizeWatch) writeCounts() (writes, conflicts, failures int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.writes, w.conflicts, w.failures
}

// span returns the first and last time a pod's spec was seen resized, and
// the last time a pod's status was written resized.
func (w *resizeWatch) span() (first, last, lastHeld time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, t := range w.seen {
		if first.IsZero() || t.Before(first) {
			first = t
		}
		if t.After(last) {
			last = t
		}
	}
	for _, t := range w.held {
		if t.After(lastHeld) {
			lastHeld = t
		}
	}
	return first, last, lastHeld
}

// podMemory is the app container's memory request in the pod's spec.
func podMemory(p *corev1.Pod) string {
	for _, c := range p.Spec.Containers {
		if c.Name == "app" {
			return c.Resources.Requests.Memory().String()
		}
	}
	return ""
}

// needsKubelet reports whether a kubelet has a resize of p to finish: it
// has not observed the pod's generation, a container's status reports
// other resources than its spec, or a resize condition is set.
func needsKubelet(p *corev1.Pod) bool {
	if p.Status.Phase != corev1.PodRunning || p.DeletionTimestamp != nil {
		return false
	}
	if p.Status.ObservedGeneration < p.Generation {
		return true
	}
	for _, cs := range p.Status.ContainerStatuses {
		c := podContainer(p, cs.Name)
		if c == nil {
			continue
		}
		if cs.Resources == nil || !apiequality.Semantic.DeepEqual(*cs.Resources, c.Resources) ||
			!apiequality.Semantic.DeepEqual(cs.AllocatedResources, c.Resources.Requests) {
			return true
		}
	}
	return slices.ContainsFunc(p.Status.Conditions, isResizeCondition)
}

func isResizeCondition(c corev1.PodCondition) bool {
	return c.Type == corev1.PodResizePending || c.Type == corev1.PodResizeInProgress
}

func podContainer(p *corev1.Pod, name string) *corev1.Container {
	for i := range p.Spec.Containers {
		if p.Spec.Containers[i].Name == name {
			return &p.Spec.Containers[i]
		}
	}
	return nil
}

// resizedStatus is p with the status a kubelet writes once the resize is
// actuated: the generation observed, each container's resources and
// allocatedResources those of its spec, no resize condition left.
func resizedStatus(p *corev1.Pod) *corev1.Pod {
	out := p.DeepCopy()
	out.Status.ObservedGeneration = out.Generation
	for i := range out.Status.ContainerStatuses {
		cs := &out.Status.ContainerStatuses[i]
		if c := podContainer(out, cs.Name); c != nil {
			cs.Resources = c.Resources.DeepCopy()
			cs.AllocatedResources = c.Resources.Requests.DeepCopy()
		}
	}
	out.Status.Conditions = slices.DeleteFunc(out.Status.Conditions, isResizeCondition)
	return out
}

// kubeletResizes watches the pods of workload app in ns until ctx is done
// and, for each one a kubelet has a resize of to finish (needsKubelet),
// writes the status it would (resizedStatus) on kubeletWriters goroutines.
// A conflict is left to the newer version's watch event.
func kubeletResizes(ctx context.Context, tb testing.TB, c client.WithWatch, ns, app string, replicas int) *resizeWatch {
	tb.Helper()
	w := &resizeWatch{seen: map[string]time.Time{}, held: map[string]time.Time{}, latest: map[string]*corev1.Pod{},
		queued: map[string]bool{}, stuck: map[string]string{}, work: make(chan string, replicas)}
	sel := client.MatchingLabels{"app": app}
	var list corev1.PodList
	require.NoError(tb, c.List(ctx, &list, client.InNamespace(ns), sel))
	rv := list.ResourceVersion
	for range kubeletWriters {
		go func() {
			for {
				var name string
				select {
				case <-ctx.Done():
					return
				case name = <-w.work:
				}
				w.mu.Lock()
				p := w.latest[name]
				delete(w.queued, name)
				w.mu.Unlock()
				out := resizedStatus(p)
				err := c.Status().Update(ctx, out)
				now := time.Now()
				w.mu.Lock()
				w.writes++
				switch {
				case apierrors.IsConflict(err):
					w.conflicts++
				case err != nil:
					w.failures++
				case needsKubelet(out):
					w.stuck[name] = out.ResourceVersion
					w.failures++
				case podMemory(p) == inPlaceMem:
					if _, ok := w.held[name]; !ok {
						w.held[name] = now
					}
				}
				w.mu.Unlock()
			}
		}()
	}
	go func() {
		for ctx.Err() == nil {
			wi, err := c.Watch(ctx, &corev1.PodList{}, client.InNamespace(ns), sel,
				&client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: true}})
			if err != nil {
				time.Sleep(100 * time.Millisecond)
				continue
			}
			for ev := range wi.ResultChan() {
				now := time.Now()
				p, ok := ev.Object.(*corev1.Pod)
				if !ok {
					continue
				}
				rv = p.ResourceVersion
				if ev.Type != watch.Modified && ev.Type != watch.Added {
					continue
				}
				w.mu.Lock()
				if _, ok := w.seen[p.Name]; !ok && podMemory(p) == inPlaceMem {
					w.seen[p.Name] = now
				}
				w.latest[p.Name] = p
				enqueue := needsKubelet(p) && !w.queued[p.Name] && len(w.queued) < cap(w.work) && w.stuck[p.Name] != p.ResourceVersion
				if enqueue {
					w.queued[p.Name] = true
				}
				w.mu.Unlock()
				if enqueue {
					w.work <- p.Name
				}
			}
			wi.Stop()
		}
	}()
	return w
}

// TestKubeletFinishesAResize resizes a pod through pods/resize on the real
// apiserver, as the leader's InPlace apply does, and checks that the
// harness writes the status a kubelet would: what the leader waits for
// (cluster/apply resizeState) is then all there.
func TestKubeletFinishesAResize(t *testing.T) {
	cp := controlplane.StartForTest(t)
	c, cs := fastClient(t, cp.Config)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	require.NoError(t, c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "kubelet"}}))
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-0"}}
	require.NoError(t, c.Create(ctx, node))
	room := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourceMemory: resource.MustParse("8Gi"), corev1.ResourcePods: resource.MustParse("10")}
	node.Status = corev1.NodeStatus{Capacity: room, Allocatable: room}
	require.NoError(t, c.Status().Update(ctx, node), "the apiserver checks a resize against the node's allocatable")
	dep := deploymentNamed("kubelet", inPlaceName, 2)
	require.NoError(t, c.Create(ctx, dep))
	_, err := replicaSetAndPods(ctx, c, dep, []string{"node-0", "node-0"})
	require.NoError(t, err)
	w := kubeletResizes(ctx, t, c, "kubelet", inPlaceName, 2)

	var list corev1.PodList
	require.NoError(t, c.List(ctx, &list, client.InNamespace("kubelet")))
	require.Len(t, list.Items, 2)
	p := list.Items[0].DeepCopy()
	require.True(t, needsKubelet(p), "a pod without allocatedResources is not finished")
	mem := resource.MustParse(inPlaceMem)
	p.Spec.Containers[0].Resources.Requests[corev1.ResourceMemory] = mem
	p.Spec.Containers[0].Resources.Limits[corev1.ResourceMemory] = mem
	_, err = cs.CoreV1().Pods("kubelet").UpdateResize(ctx, p.Name, p, metav1.UpdateOptions{})
	require.NoError(t, err)

	require.Eventually(t, func() bool { _, held := w.counts(); return held == 1 }, 10*time.Second, 20*time.Millisecond)
	seen, _ := w.counts()
	require.Equal(t, 1, seen, "only the resized pod carries the new memory")
	var got corev1.Pod
	require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(p), &got))
	require.False(t, needsKubelet(&got), "status: %+v", got.Status)
	require.Equal(t, got.Generation, got.Status.ObservedGeneration)
	require.Greater(t, got.Generation, int64(1), "the resize bumps the pod's generation")
	cst := got.Status.ContainerStatuses[0]
	require.Equal(t, inPlaceMem, cst.Resources.Limits.Memory().String())
	require.Equal(t, inPlaceMem, cst.AllocatedResources.Memory().String())
	require.Equal(t, corev1.PodRunning, got.Status.Phase)
	writes, conflicts, failures := w.writeCounts()
	require.Zero(t, failures, "%d writes, %d conflicts", writes, conflicts)
}
