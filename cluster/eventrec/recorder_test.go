package eventrec

import (
	"context"
	"fmt"
	"hash/maphash"
	goruntime "runtime"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	eventsv1client "k8s.io/client-go/kubernetes/typed/events/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/reference"

	"github.com/kerf-dev/kerf/internal/kube"
	"github.com/kerf-dev/kerf/test/controlplane"
)

// TestMain shares one real apiserver among the package's tests.
func TestMain(m *testing.M) { controlplane.Main(m, controlplane.Hooks{}) }

// setUp returns a namespace of its own with a ConfigMap and a Secret for
// Events to regard, on the shared control plane.
func setUp(t *testing.T) (*controlplane.ControlPlane, *corev1.ConfigMap, *corev1.Secret) {
	cp := controlplane.Get(t)
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "eventrec-"}}
	require.NoError(t, cp.Client.Create(ctx, ns))
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "regarding"}}
	require.NoError(t, cp.Client.Create(ctx, cm))
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "related"}}
	require.NoError(t, cp.Client.Create(ctx, sec))
	return cp, cm, sec
}

// start runs r until the test ends.
func start(t *testing.T, r *Recorder) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = r.Start(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
}

// listEvents lists the Events of ns by reason.
func listEvents(t *testing.T, cp *controlplane.ControlPlane, ns string) map[string]eventsv1.Event {
	list, err := cp.Clientset.EventsV1().Events(ns).List(context.Background(), metav1.ListOptions{})
	require.NoError(t, err)
	out := map[string]eventsv1.Event{}
	for _, e := range list.Items {
		out[e.Reason] = e
	}
	return out
}

func TestEventsAreWrittenAndRepeatsJoinTheirSeries(t *testing.T) {
	cp, cm, sec := setUp(t)
	r, err := New(Config{Events: cp.Clientset.EventsV1(), Scheme: kube.Scheme, Controller: "kerf-test"})
	require.NoError(t, err)
	start(t, r)

	r.Eventf(cm, sec, corev1.EventTypeNormal, "Applied", "Apply", "applied %d", 1)
	r.Eventf(cm, nil, corev1.EventTypeWarning, "RolledBack", "Rollback", "rolled back")
	// Repeats of the first: one series, counted; another note is not
	// written (client-go's series do the same).
	for i := range 4 {
		r.Eventf(cm, sec, corev1.EventTypeNormal, "Applied", "Apply", "applied again %d", i)
	}
	// Not isomorphic: another related object.
	r.Eventf(cm, cm, corev1.EventTypeNormal, "Applied", "Apply", "applied, related to itself")

	require.Eventually(t, func() bool {
		var n int
		list, err := cp.Clientset.EventsV1().Events(cm.Namespace).List(context.Background(), metav1.ListOptions{})
		require.NoError(t, err)
		for _, e := range list.Items {
			if e.Reason == "Applied" && e.Related != nil && e.Related.Kind == "Secret" && e.Series != nil && e.Series.Count == 5 {
				n++
			}
		}
		return n == 1 && len(list.Items) == 3
	}, 30*time.Second, 50*time.Millisecond, "the Events and the series of five")

	list, err := cp.Clientset.EventsV1().Events(cm.Namespace).List(context.Background(), metav1.ListOptions{})
	require.NoError(t, err)
	for _, e := range list.Items {
		assert.Equal(t, "kerf-test", e.ReportingController)
		assert.Equal(t, cm.UID, e.Regarding.UID, "regarding")
		assert.Equal(t, "ConfigMap", e.Regarding.Kind)
		switch {
		case e.Reason == "RolledBack":
			assert.Equal(t, corev1.EventTypeWarning, e.Type)
			assert.Equal(t, "Rollback", e.Action)
			assert.Nil(t, e.Related)
		case e.Related != nil && e.Related.Kind == "Secret":
			assert.Equal(t, "applied 1", e.Note)
			assert.Equal(t, sec.UID, e.Related.UID)
		default:
			assert.Equal(t, "applied, related to itself", e.Note)
			assert.Nil(t, e.Series)
		}
	}
	assert.Zero(t, testutil.ToFloat64(r.dropped))
	assert.Zero(t, testutil.ToFloat64(r.failed))
}

// gated holds every Create until its gate is closed: an apiserver slower
// than the Events come.
type gated struct {
	eventsv1client.EventsGetter
	gate chan struct{}
}

func (g gated) Events(ns string) eventsv1client.EventInterface {
	return gatedEvents{g.EventsGetter.Events(ns), g.gate}
}

type gatedEvents struct {
	eventsv1client.EventInterface
	gate chan struct{}
}

func (g gatedEvents) Create(ctx context.Context, e *eventsv1.Event, opts metav1.CreateOptions) (*eventsv1.Event, error) {
	<-g.gate
	return g.EventInterface.Create(ctx, e, opts)
}

// TestTheQueueAndTheSeriesAreBounded: while the apiserver does not
// answer, Events past the queue are dropped and counted, never held; the
// series keys kept never pass MaxSeries, and once its key is forgotten an
// Event is written anew.
func TestTheQueueAndTheSeriesAreBounded(t *testing.T) {
	cp, cm, _ := setUp(t)
	gate := make(chan struct{})
	r, err := New(Config{Events: gated{cp.Clientset.EventsV1(), gate}, Scheme: kube.Scheme, Controller: "kerf-test",
		QueueSize: 3, Workers: 1, MaxSeries: 4})
	require.NoError(t, err)
	start(t, r)

	const n = 12
	for i := range n {
		r.Eventf(cm, nil, corev1.EventTypeNormal, fmt.Sprintf("Reason%02d", i), "Test", "event %d", i)
		assert.LessOrEqual(t, r.series.Len(), 4, "series keys kept")
	}
	// The worker holds one (or none yet), the queue three: the rest is
	// dropped.
	dropped := int(testutil.ToFloat64(r.dropped))
	assert.GreaterOrEqual(t, dropped, n-4)
	assert.LessOrEqual(t, dropped, n-3)
	close(gate)
	require.Eventually(t, func() bool { return len(listEvents(t, cp, cm.Namespace)) == n-dropped },
		30*time.Second, 50*time.Millisecond, "the Events not dropped are written")
	written := listEvents(t, cp, cm.Namespace)
	assert.Contains(t, written, "Reason00", "the first Event, taken by the worker or queued, is written")

	// Reason00's key was forgotten (four newer ones): a repeat is a new
	// Event, not a series.
	r.Eventf(cm, nil, corev1.EventTypeNormal, "Reason00", "Test", "event 0 again")
	require.Eventually(t, func() bool {
		list, err := cp.Clientset.EventsV1().Events(cm.Namespace).List(context.Background(), metav1.ListOptions{})
		require.NoError(t, err)
		n := 0
		for _, e := range list.Items {
			if e.Reason == "Reason00" {
				assert.Nil(t, e.Series)
				n++
			}
		}
		return n == 2
	}, 30*time.Second, 50*time.Millisecond, "a repeat of a forgotten key is written anew")
}

// TestAnUnreachableApiserverIsTriedAgainThenCounted: an Event the
// apiserver cannot be reached for is tried Retries times, then counted as
// failed.
func TestAnUnreachableApiserverIsTriedAgainThenCounted(t *testing.T) {
	_, cm, _ := setUp(t)
	cs, err := eventsv1client.NewForConfig(&rest.Config{Host: "https://127.0.0.1:1", Timeout: time.Second})
	require.NoError(t, err)
	r, err := New(Config{Events: cs, Scheme: kube.Scheme, Controller: "kerf-test", Retries: 3, RetryWait: 10 * time.Millisecond})
	require.NoError(t, err)
	start(t, r)
	r.Eventf(cm, nil, corev1.EventTypeNormal, "Unsent", "Test", "never sent")
	require.Eventually(t, func() bool { return testutil.ToFloat64(r.failed) == 1 }, 30*time.Second, 10*time.Millisecond)
}

// TestAFinalErrorIsNotTriedAgain: an error Config.Final calls final (the
// fence's refusal) is counted at once, not tried Retries times.
func TestAFinalErrorIsNotTriedAgain(t *testing.T) {
	_, cm, _ := setUp(t)
	cs, err := eventsv1client.NewForConfig(&rest.Config{Host: "https://127.0.0.1:1", Timeout: time.Second})
	require.NoError(t, err)
	tries := 0
	r, err := New(Config{Events: cs, Scheme: kube.Scheme, Controller: "kerf-test", RetryWait: time.Hour,
		Final: func(error) bool { tries++; return true }})
	require.NoError(t, err)
	start(t, r)
	r.Eventf(cm, nil, corev1.EventTypeNormal, "Refused", "Test", "refused")
	require.Eventually(t, func() bool { return testutil.ToFloat64(r.failed) == 1 }, 30*time.Second, 10*time.Millisecond,
		"counted at once (another try would wait an hour)")
	assert.Equal(t, 1, tries)
}

func TestConfigNamesWhatIsMissing(t *testing.T) {
	_, err := New(Config{Scheme: kube.Scheme, Controller: "kerf-test"})
	require.ErrorContains(t, err, "Config.Events")
	_, err = New(Config{Events: eventsv1client.New(nil), Scheme: kube.Scheme})
	require.ErrorContains(t, err, "Config.Controller")
}

// TestTheSeriesHoldWhatTheDefaultSays: full, the series of a Recorder
// (DefaultMaxSeries of them) hold what DefaultMaxSeries's comment says, for
// Events like the leader's (a recommendation regarded, a pod related, a
// note of a hundred bytes). Nothing is sent: the Recorder is not started,
// and its queue of one drops the rest.
func TestTheSeriesHoldWhatTheDefaultSays(t *testing.T) {
	cp := controlplane.Get(t)
	r, err := New(Config{Events: cp.Clientset.EventsV1(), Scheme: kube.Scheme, Controller: "kerf-leader", QueueSize: 1})
	require.NoError(t, err)
	regarding := make([]*corev1.ConfigMap, DefaultMaxSeries)
	related := make([]*corev1.Pod, DefaultMaxSeries)
	for i := range regarding {
		regarding[i] = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "scale-000", Name: fmt.Sprintf("w-%05d", i),
			UID: types.UID(fmt.Sprintf("%08d-0c76-41c6-910b-81012b4c7e66", i)), ResourceVersion: "51945"}}
		related[i] = &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "scale-000", Name: fmt.Sprintf("w-%05d-5d8f7c9b6-abcde", i),
			UID: types.UID(fmt.Sprintf("%08d-a9d8-4ddf-aae3-9e210fbbdbe0", i)), ResourceVersion: "51684"}}
	}
	var before, after goruntime.MemStats
	goruntime.GC()
	goruntime.ReadMemStats(&before)
	for i := range regarding {
		r.Eventf(regarding[i], related[i], corev1.EventTypeWarning, "RolledBack", "Rollback",
			"memory restored to 256Mi after OOMKills of container %s in pod %s: the change to %s is blocked for %s", "app", related[i].Name, "192Mi", "24h0m0s")
	}
	goruntime.GC()
	goruntime.ReadMemStats(&after)
	require.Equal(t, DefaultMaxSeries, r.series.Len())
	per := float64(after.HeapAlloc-before.HeapAlloc) / DefaultMaxSeries
	t.Logf("%d series: %.0f bytes each, %.1f MB in all", DefaultMaxSeries, per, per*DefaultMaxSeries/1e6)
	assert.Less(t, per*DefaultMaxSeries, 3.2e6, "about 3 MB, as DefaultMaxSeries says (5.7 MB when each kept its key and its whole Event)")
	goruntime.KeepAlive(regarding)
	goruntime.KeepAlive(related)
}

// TestAnEventUnderAnotherSeriesHashStartsItsOwn: the series are kept by
// their key's hash. An Event whose hash finds the series of an Event not
// isomorphic to it (a collision, made here by filing a series under
// another key's hash) is written as an Event of its own, not counted in
// that series.
func TestAnEventUnderAnotherSeriesHashStartsItsOwn(t *testing.T) {
	cp := controlplane.Get(t)
	r, err := New(Config{Events: cp.Clientset.EventsV1(), Scheme: kube.Scheme, Controller: "kerf-test", QueueSize: 4})
	require.NoError(t, err)
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "regarding", UID: "u-1"}}
	r.Eventf(cm, nil, corev1.EventTypeNormal, "First", "Test", "first")
	require.Equal(t, 1, r.series.Len())
	first := (<-r.queue).create
	require.NotNil(t, first)

	// File First's series under the hash Second's key has.
	ref, err := reference.GetReference(kube.Scheme, cm)
	require.NoError(t, err)
	key := seriesKey{eventType: corev1.EventTypeNormal, action: "Test", reason: "First", regarding: *ref}
	v, ok := r.series.Get(maphash.Comparable(r.seed, key))
	require.True(t, ok, "First's series is under its key's hash")
	second := key
	second.reason = "Second"
	r.series.Add(maphash.Comparable(r.seed, second), v)

	r.Eventf(cm, nil, corev1.EventTypeNormal, "Second", "Test", "second")
	j := <-r.queue
	require.NotNil(t, j.create, "an Event of its own, not a repeat in First's series")
	assert.Equal(t, "Second", j.create.Reason)
	assert.NotEqual(t, first.Name, j.create.Name)
	found, ok := r.series.Get(maphash.Comparable(r.seed, second))
	require.True(t, ok)
	assert.Equal(t, "Second", found.(*series).key.reason, "its series took the hash's place")
	assert.Equal(t, int32(1), v.(*series).count, "First's series counted nothing")
}
