package apply_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/cluster/apply"
	"github.com/kerf-dev/kerf/cluster/resources"
)

// resizeMeter counts the pods/resize requests a clientset sends and how
// many were in flight at once at most. Each resize waits lag before it is
// sent, as over a network, so that resizes sent together overlap.
type resizeMeter struct {
	lag      time.Duration
	inFlight atomic.Int32
	max      atomic.Int32
	total    atomic.Int32
	// intercept, when set, may answer a resize of the pod itself.
	intercept func(pod string) (*http.Response, bool)
}

// clientset returns a clientset of the control plane's config whose
// requests go through the meter.
func (m *resizeMeter) clientset(t testing.TB, cfg *rest.Config) kubernetes.Interface {
	cfg = rest.CopyConfig(cfg)
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		return roundTripper(func(r *http.Request) (*http.Response, error) {
			pod, ok := resizedPod(r)
			if !ok {
				return rt.RoundTrip(r)
			}
			m.total.Add(1)
			n := m.inFlight.Add(1)
			defer m.inFlight.Add(-1)
			for {
				old := m.max.Load()
				if n <= old || m.max.CompareAndSwap(old, n) {
					break
				}
			}
			time.Sleep(m.lag)
			if m.intercept != nil {
				if resp, ok := m.intercept(pod); ok {
					resp.Request = r
					return resp, nil
				}
			}
			return rt.RoundTrip(r)
		})
	}
	cs, err := kubernetes.NewForConfig(cfg)
	require.NoError(t, err)
	return cs
}

// resizedPod returns the pod a pods/resize write is about.
func resizedPod(r *http.Request) (string, bool) {
	if r.Method != http.MethodPut || !strings.HasSuffix(r.URL.Path, "/resize") {
		return "", false
	}
	parts := strings.Split(r.URL.Path, "/")
	return parts[len(parts)-2], true
}

// internalError is the apiserver's answer to a request it failed.
func internalError() *http.Response {
	body := `{"kind":"Status","apiVersion":"v1","status":"Failure","message":"etcd is away","reason":"InternalError","code":500}`
	return &http.Response{StatusCode: http.StatusInternalServerError, Header: http.Header{"Content-Type": []string{"application/json"}},
		Body: io.NopCloser(strings.NewReader(body))}
}

// inPlaceChange is the InPlace change of app to appAfter's values.
func inPlaceChange() *v1alpha1.Change {
	return &v1alpha1.Change{
		AppliedAt: metav1.NewTime(t0), Strategy: v1alpha1.StrategyInPlace, Resources: []v1alpha1.ResourceName{v1alpha1.ResourceCPU, v1alpha1.ResourceMemory},
		Containers: []v1alpha1.ContainerChange{{
			Name:     "app",
			Previous: v1alpha1.Resources{Requests: &v1alpha1.ResourceValues{CPU: q("500m")}, Limits: &v1alpha1.ResourceValues{Memory: q("512Mi")}},
			Applied:  v1alpha1.Resources{Requests: &v1alpha1.ResourceValues{CPU: q("750m")}, Limits: &v1alpha1.ResourceValues{Memory: q("768Mi")}},
		}},
	}
}

// sortedPodNames are the names of the workload's pods, by name.
func sortedPodNames(w *workload, extra ...string) []string {
	names := slices.Clone(extra)
	for _, p := range w.pods {
		names = append(names, p.Name)
	}
	slices.Sort(names)
	return names
}

// TestInPlaceApplyResizesPodsConcurrently: the resizes of one apply over 40
// pods are in flight together, up to the default bound, and the result
// lists the pods by name as a serial apply did; a pod the apiserver refuses
// (its QoS class would change) is Failed while the others are Touched. The
// restore of the change resizes them back the same way. Before the resizes
// ran concurrently at most one was in flight.
func TestInPlaceApplyResizesPodsConcurrently(t *testing.T) {
	e := newEnv(t)
	w := e.createWorkload(v1alpha1.KindDeployment, "web", workloadOpts{pods: 40, containers: []corev1.Container{appContainer()}})
	// Guaranteed: 750m with a limit of 1 would make it Burstable.
	refused := e.injectedPod(w, "web-1-guaranteed", requirements("1", "512Mi", "1", "512Mi"))
	m := &resizeMeter{lag: 20 * time.Millisecond}
	e.applier.Clientset = m.clientset(t, e.cp.Config)

	rsr := e.rsr(w, v1alpha1.StrategyInPlace, values("app", "750m", "", "", "768Mi"))
	change := inPlaceChange()
	res, err := e.applier.Apply(e.ctx, rsr, change)
	require.NoError(t, err)

	assert.Equal(t, int32(41), m.total.Load(), "one resize per pod")
	assert.Greater(t, m.max.Load(), int32(apply.DefaultResizeConcurrency/2), "the resizes were in flight together")
	assert.LessOrEqual(t, m.max.Load(), int32(apply.DefaultResizeConcurrency), "no more than the bound at once")

	names := sortedPodNames(w)
	var want []string
	for _, n := range names {
		want = append(want, "Pod/"+n)
		got := e.pod(n)
		assertResources(t, appAfter, resourcesOf(&got.Spec, "app"), "pod %s resized", n)
	}
	assert.Equal(t, want, touchedNames(res), "every pod but the refused one, by name")
	for _, o := range res.Touched {
		assert.Equal(t, e.pod(o.Name).ResourceVersion, o.ResourceVersion, "pod %s as written", o.Name)
	}
	assert.Equal(t, names, res.Pending, "by name, until the kubelet reports the values")
	require.Len(t, res.Failed, 1)
	assert.Equal(t, refused.Name, res.Failed[0].Pod)
	assert.Equal(t, v1alpha1.ResizeRejected, res.Failed[0].Reason)
	assert.Contains(t, res.Failed[0].Message, "QOS")
	assertResources(t, requirements("1", "512Mi", "1", "512Mi"), resourcesOf(&e.pod(refused.Name).Spec, "app"), "the refused pod is left as it was")

	m.max.Store(0)
	m.total.Store(0)
	res, err = e.applier.Restore(e.ctx, rsr, change, resources.Previous(change), change.Resources, nil)
	require.NoError(t, err)
	assert.Equal(t, int32(41), m.total.Load(), "one resize back per pod")
	assert.Greater(t, m.max.Load(), int32(apply.DefaultResizeConcurrency/2), "the restore's resizes were in flight together")
	assert.Equal(t, want, touchedNames(res))
	for _, n := range names {
		assertResources(t, appBefore, resourcesOf(&e.pod(n).Spec, "app"), "pod %s resized back", n)
	}
	require.Len(t, res.Failed, 1)
	assert.Equal(t, refused.Name, res.Failed[0].Pod)
}

// TestInPlaceApplyConcurrencyOneResizesOnePodAfterAnother: with
// ResizeConcurrency 1 one resize is in flight at a time, and the result is
// the same as with the default.
func TestInPlaceApplyConcurrencyOneResizesOnePodAfterAnother(t *testing.T) {
	e := newEnv(t)
	w := e.createWorkload(v1alpha1.KindStatefulSet, "db", workloadOpts{pods: 5})
	m := &resizeMeter{lag: 10 * time.Millisecond}
	e.applier.Clientset = m.clientset(t, e.cp.Config)
	e.applier.ResizeConcurrency = 1
	res, err := e.applier.Apply(e.ctx, e.rsr(w, v1alpha1.StrategyInPlace, values("app", "750m", "", "", "768Mi")), inPlaceChange())
	require.NoError(t, err)
	assert.Equal(t, int32(1), m.max.Load())
	assert.Equal(t, int32(5), m.total.Load())
	assert.Equal(t, []string{"Pod/db-0", "Pod/db-1", "Pod/db-2", "Pod/db-3", "Pod/db-4"}, touchedNames(res))
}

// TestInPlaceApplyErrorIsTheFirstPodsAndStopsNewResizes: when the
// apiserver fails two pods' resizes, the apply returns the error of the
// first of them by name (not the one that failed first in time), starts no
// resize after the errors (each resize is slow enough that the first 16
// are still in flight when the errors come), and the pods resized meanwhile
// carry the values, so the apply done again reports them without writing
// them again.
func TestInPlaceApplyErrorIsTheFirstPodsAndStopsNewResizes(t *testing.T) {
	e := newEnv(t)
	w := e.createWorkload(v1alpha1.KindDeployment, "web", workloadOpts{pods: 40, containers: []corev1.Container{appContainer()}})
	var failing atomic.Bool
	failing.Store(true)
	m := &resizeMeter{lag: 50 * time.Millisecond}
	m.intercept = func(pod string) (*http.Response, bool) {
		if !failing.Load() {
			return nil, false
		}
		switch pod {
		case "web-1": // second by name; fails last
			time.Sleep(100 * time.Millisecond)
			return internalError(), true
		case "web-10": // third by name; fails first
			return internalError(), true
		}
		// The others are still in flight when both have failed.
		time.Sleep(200 * time.Millisecond)
		return nil, false
	}
	e.applier.Clientset = m.clientset(t, e.cp.Config)
	rsr := e.rsr(w, v1alpha1.StrategyInPlace, values("app", "750m", "", "", "768Mi"))
	_, err := e.applier.Apply(e.ctx, rsr, inPlaceChange())
	require.Error(t, err)
	assert.Contains(t, err.Error(), "resize pod "+e.ns+"/web-1:")
	assert.NotContains(t, err.Error(), "web-10")
	assert.Equal(t, int32(apply.DefaultResizeConcurrency), m.total.Load(), "no resize started after the errors")

	resized := map[string]string{}
	for _, n := range sortedPodNames(w) {
		p := e.pod(n)
		if cpu := resourcesOf(&p.Spec, "app").Requests[corev1.ResourceCPU]; cpu.MilliValue() == 750 {
			resized[n] = p.ResourceVersion
		}
	}
	assert.Len(t, resized, apply.DefaultResizeConcurrency-2, "the resizes in flight finished")

	failing.Store(false)
	m.total.Store(0)
	res, err := e.applier.Apply(e.ctx, rsr, inPlaceChange())
	require.NoError(t, err)
	assert.Equal(t, int32(40-len(resized)), m.total.Load(), "only the pods not resized yet are written")
	assert.Len(t, res.Touched, 40)
	for n, rv := range resized {
		assert.Equal(t, rv, e.pod(n).ResourceVersion, "pod %s not written again", n)
	}
}

// TestInPlaceApplyStopsStartingResizesWhenTheContextEnds: once the
// context is cancelled no further resize starts, and the apply returns the
// context's error.
func TestInPlaceApplyStopsStartingResizesWhenTheContextEnds(t *testing.T) {
	e := newEnv(t)
	w := e.createWorkload(v1alpha1.KindDeployment, "web", workloadOpts{pods: 40, containers: []corev1.Container{appContainer()}})
	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	m := &resizeMeter{lag: 50 * time.Millisecond}
	var once sync.Once
	m.intercept = func(string) (*http.Response, bool) {
		once.Do(cancel)
		return nil, false
	}
	e.applier.Clientset = m.clientset(t, e.cp.Config)
	_, err := e.applier.Apply(ctx, e.rsr(w, v1alpha1.StrategyInPlace, values("app", "750m", "", "", "768Mi")), inPlaceChange())
	require.ErrorIs(t, err, context.Canceled)
	assert.LessOrEqual(t, m.total.Load(), int32(apply.DefaultResizeConcurrency), "no resize started after the cancel")
}

// BenchmarkInPlaceApply40Pods applies an InPlace change to 40 pods (and
// back, alternately), one resize after another and with the default
// concurrency, on the real apiserver with the control plane's client
// budget: over loopback (rtt=0), and with 5 ms added before each resize is
// sent, as a network between the leader and the apiserver would (rtt=5ms).
// Compare the sub-benchmarks' ns/op.
func BenchmarkInPlaceApply40Pods(b *testing.B) {
	e := newEnv(b)
	w := e.createWorkload(v1alpha1.KindDeployment, "web", workloadOpts{pods: 40, containers: []corev1.Container{appContainer()}})
	rsr := e.rsr(w, v1alpha1.StrategyInPlace, values("app", "750m", "", "", "768Mi"))
	forth := inPlaceChange()
	back := forth.DeepCopy()
	back.Containers[0].Applied = back.Containers[0].Previous
	applied := false // whether the pods run forth's values
	for _, rtt := range []time.Duration{0, 5 * time.Millisecond} {
		m := &resizeMeter{lag: rtt}
		e.applier.Clientset = m.clientset(b, e.cp.Config)
		for _, concurrency := range []int{1, apply.DefaultResizeConcurrency} {
			b.Run(fmt.Sprintf("rtt=%s/concurrency=%d", rtt, concurrency), func(b *testing.B) {
				e.applier.ResizeConcurrency = concurrency
				for b.Loop() {
					change := forth
					if applied {
						change = back
					}
					applied = !applied
					res, err := e.applier.Apply(e.ctx, rsr, change)
					if err != nil {
						b.Fatal(err)
					}
					if len(res.Touched) != 40 || len(res.Failed) != 0 {
						b.Fatalf("touched %d, failed %v", len(res.Touched), res.Failed)
					}
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/40, "ns/pod")
			})
		}
	}
}
