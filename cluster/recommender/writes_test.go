package recommender

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/cluster/signals"
	"github.com/kerf-dev/kerf/test/controlplane"
	"github.com/kerf-dev/kerf/test/kubetest"
)

// heldWrites is a client whose creates of recommendations are counted
// while in flight and held until hold of them are in flight at once (or
// wait has passed), and whose create for failName fails once.
type heldWrites struct {
	client.Client
	hold     int
	wait     time.Duration
	failName string

	mu       sync.Mutex
	inFlight int
	most     int
	reached  chan struct{}
	failed   bool
}

func (h *heldWrites) Create(ctx context.Context, obj client.Object, opts ...client.CreateOption) error {
	if _, ok := obj.(*v1alpha1.RightsizingRecommendation); !ok {
		return h.Client.Create(ctx, obj, opts...)
	}
	h.mu.Lock()
	if obj.GetName() == h.failName && !h.failed {
		h.failed = true
		h.mu.Unlock()
		return fmt.Errorf("the test fails the create of %s", obj.GetName())
	}
	h.inFlight++
	h.most = max(h.most, h.inFlight)
	if h.inFlight >= h.hold {
		select {
		case <-h.reached:
		default:
			close(h.reached)
		}
	}
	h.mu.Unlock()
	select {
	case <-h.reached:
	case <-time.After(h.wait):
	}
	err := h.Client.Create(ctx, obj, opts...)
	h.mu.Lock()
	h.inFlight--
	h.mu.Unlock()
	return err
}

// mostInFlight is the most creates that were in flight at once.
func (h *heldWrites) mostInFlight() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.most
}

// webs creates n Deployments web-<i> (500m, 256Mi) under a recommending
// policy in ns, each with an adopted pod, and feeds sig four readings of
// each pod's container a second apart: enough history to recommend for.
func webs(t *testing.T, c client.Client, ns string, n int, sig *signals.Stores) {
	t.Helper()
	require.NoError(t, c.Create(context.Background(), kubetest.RecommendingPolicy(ns)))
	now := time.Now()
	for i := range n {
		dep := kubetest.Deployment(ns, fmt.Sprintf("web-%d", i), "500m", "256Mi")
		require.NoError(t, c.Create(context.Background(), dep))
		pod := kubetest.AdoptedPod(t, c, dep, dep.Name+"-1")
		for j := range 4 {
			sig.Usage.Add(signals.UsageSample{PodUID: pod.UID, Container: "app", At: now.Add(time.Duration(j-3) * time.Second),
				CPU: time.Duration(j) * 50 * time.Millisecond, WorkingSet: 40 << 20, Peak: 40 << 20})
		}
	}
}

// recommended lists the recommendations the recommender made in ns.
func recommended(t *testing.T, c client.Client, ns string) []string {
	t.Helper()
	var l v1alpha1.RightsizingRecommendationList
	require.NoError(t, c.List(context.Background(), &l, client.InNamespace(ns),
		client.MatchingLabels{v1alpha1.RecommendedByLabel: v1alpha1.RecommendedByKerf}))
	var names []string
	for _, r := range l.Items {
		names = append(names, r.Name)
	}
	return names
}

// TestRecommenderWritesItsRecommendationsAtOnce checks on a real
// apiserver that one pass's recommendations are written by Workers at
// once, not one after another: each create is held until four are in
// flight. One after another, each would wait out the hold alone and
// the most in flight would be one.
func TestRecommenderWritesItsRecommendationsAtOnce(t *testing.T) {
	c := controlplane.Get(t).Client
	ns := namespace(t, c)
	sig := signals.New()
	webs(t, c, ns, 6, sig)
	held := &heldWrites{Client: client.NewNamespacedClient(c, ns), hold: 4, wait: 3 * time.Second, reached: make(chan struct{})}
	reg := prometheus.NewRegistry()
	r, err := New(held, held, []string{ns}, sig, Config{Workers: 4}, nil, reg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	require.NoError(t, err)

	require.NoError(t, r.pass(t.Context()))
	assert.Equal(t, 4, held.mostInFlight(), "creates in flight at once")
	assert.Len(t, recommended(t, c, ns), 6, "every workload's recommendation")
	assert.Equal(t, 6.0, testutil.ToFloat64(r.writers.writes.WithLabelValues(writeCreated)))
	assert.Equal(t, map[string]uint64{"policies": 1, "feed": 1, "throttling": 1, "prune": 1, "recommend": 1, "checkpoint": 1, "total": 1},
		passSteps(t, reg), "the writes are the recommend step's, once")
}

// TestAFailedRecommendationWriteLosesNoOther checks that a create that
// fails, among writes in flight together, is counted and logged, leaves
// the others written, and is tried again on the next pass, not an
// interval later.
func TestAFailedRecommendationWriteLosesNoOther(t *testing.T) {
	c := controlplane.Get(t).Client
	ns := namespace(t, c)
	sig := signals.New()
	webs(t, c, ns, 6, sig)
	held := &heldWrites{Client: client.NewNamespacedClient(c, ns), hold: 3, wait: 3 * time.Second, reached: make(chan struct{}),
		failName: "web-2"}
	// The clock stands still: the policy's 1 s interval never elapses,
	// so only a workload not yet recommended for is written again.
	at := time.Now()
	r, err := New(held, held, []string{ns}, sig, Config{Workers: 3}, func() time.Time { return at }, prometheus.NewRegistry(),
		slog.New(slog.NewTextHandler(io.Discard, nil)))
	require.NoError(t, err)

	require.NoError(t, r.pass(t.Context()))
	assert.ElementsMatch(t, []string{"web-0", "web-1", "web-3", "web-4", "web-5"}, recommended(t, c, ns), "every other write")
	assert.Equal(t, 1.0, testutil.ToFloat64(r.writers.writes.WithLabelValues(writeFailed)))
	assert.Equal(t, 5.0, testutil.ToFloat64(r.writers.writes.WithLabelValues(writeCreated)))

	require.NoError(t, r.pass(t.Context()))
	assert.Len(t, recommended(t, c, ns), 6, "the failed one, tried again")
	assert.Equal(t, 6.0, testutil.ToFloat64(r.writers.writes.WithLabelValues(writeCreated)), "and no other written twice")
}
