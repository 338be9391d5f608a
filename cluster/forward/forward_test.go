package forward

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/url"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hubv1 "github.com/kerf-dev/kerf/api/hub/v1"
	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/test/controlplane"
	"github.com/kerf-dev/kerf/test/hubtest"
)

func TestMain(m *testing.M) {
	controlplane.Main(m, controlplane.Hooks{Teardown: hubtest.StopPostgres})
}

// eachBackend runs fn on a hub over SQLite and over PostgreSQL.
func eachBackend(t *testing.T, fn func(t *testing.T, h *hubtest.Hub)) {
	controlplane.Get(t)
	hubtest.EachBackend(t, []string{"east", "west"}, fn)
}

func namespace(t *testing.T) string {
	t.Helper()
	c := controlplane.Get(t).Client
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "kerf-forward-test-"}}
	require.NoError(t, c.Create(context.Background(), ns))
	return ns.Name
}

// forwarder is a Forwarder of cluster east delivering ns's
// recommendations (read straight from the apiserver) to h.
func forwarder(t *testing.T, h *hubtest.Hub, ns string, mutate ...func(*Config)) *Forwarder {
	t.Helper()
	cfg := Config{URL: h.URL, TokenFile: h.TokenFile(t, "east"), Cluster: "east", TLS: h.TLS, Namespace: ns, Identity: "kerf-leader-a",
		Registerer: prometheus.NewRegistry(), Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if testing.Verbose() {
		cfg.Log = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	for _, m := range mutate {
		m(&cfg)
	}
	c := client.NewNamespacedClient(controlplane.Get(t).Client, ns)
	f, err := New(cfg, c, c)
	require.NoError(t, err)
	return f
}

// drain runs passes until there is nothing more to send and requires
// each to succeed.
func drain(t *testing.T, f *Forwarder) {
	t.Helper()
	for range 100 {
		more, err := f.Pass(context.Background())
		require.NoError(t, err)
		if !more {
			return
		}
	}
	t.Fatal("still sending after 100 passes")
}

// create makes recommendation ns/name of Deployment name.
func create(t *testing.T, ns, name string) *v1alpha1.RightsizingRecommendation {
	t.Helper()
	cpu := resource.MustParse("250m")
	rsr := &v1alpha1.RightsizingRecommendation{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1alpha1.RightsizingRecommendationSpec{
			TargetRef:  v1alpha1.TargetRef{APIVersion: "apps/v1", Kind: v1alpha1.KindDeployment, Name: name},
			Strategy:   v1alpha1.StrategyRollout,
			Containers: []v1alpha1.ContainerResources{{Name: "app", Requests: &v1alpha1.ResourceValues{CPU: &cpu}}},
		},
	}
	require.NoError(t, controlplane.Get(t).Client.Create(context.Background(), rsr))
	return rsr
}

// record adds n blocked actions to the recommendation's history the way
// the leader's record does (numbered by Seq, the newest 100 kept), one
// second apart from at.
func record(t *testing.T, ns, name string, n int, at time.Time) {
	t.Helper()
	c := controlplane.Get(t).Client
	var rsr v1alpha1.RightsizingRecommendation
	require.NoError(t, c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &rsr))
	h := rsr.Status.History
	for i := range n {
		seq := int64(1)
		if len(h) > 0 {
			seq = h[len(h)-1].Seq + 1
		}
		h = append(h, v1alpha1.Action{Seq: seq, Time: metav1.NewTime(at.Add(time.Duration(i) * time.Second)), Type: v1alpha1.ActionBlocked,
			Reason: v1alpha1.ReasonNoPolicy, Message: fmt.Sprintf("%s #%d", name, seq)})
		if len(h) > 100 {
			h = slices.Clone(h[len(h)-100:])
		}
	}
	rsr.Status.History, rsr.Status.Phase, rsr.Status.Reason = h, v1alpha1.PhaseBlocked, v1alpha1.ReasonNoPolicy
	require.NoError(t, c.Status().Update(context.Background(), &rsr))
}

// messages are the hub's actions of a recommendation, oldest first.
func messages(entries []hubv1.Entry, recommendation string) []string {
	var out []string
	for _, e := range slices.Backward(entries) {
		if e.Recommendation == recommendation {
			out = append(out, e.Message)
		}
	}
	return out
}

func want(name string, from, to int) []string {
	var out []string
	for i := from; i <= to; i++ {
		out = append(out, fmt.Sprintf("%s #%d", name, i))
	}
	return out
}

func cursors(t *testing.T, ns string) map[string]string {
	t.Helper()
	var cm corev1.ConfigMap
	require.NoError(t, controlplane.Get(t).Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: CursorConfigMap}, &cm))
	packed := map[types.UID]int64{}
	require.NoError(t, unpackCursors(cm.BinaryData[packedCursorsKey], packed))
	out := maps.Clone(cm.Data)
	if out == nil {
		out = map[string]string{}
	}
	for uid, n := range packed {
		out[string(uid)] = strconv.FormatInt(n, 10)
	}
	return out
}

// TestActionsRecordedWhileTheHubIsDownArriveOnceAndInOrder records
// actions of two recommendations while the hub's listener is closed: the
// forwarder fails, counts them undelivered, and once the hub is back
// delivers each once, in order, in batches; a leader that lost the cursor
// (a failover before it was written) resends, and the hub stores and
// counts nothing twice.
func TestActionsRecordedWhileTheHubIsDownArriveOnceAndInOrder(t *testing.T) {
	eachBackend(t, func(t *testing.T, h *hubtest.Hub) {
		ns := namespace(t)
		at := time.Now().UTC().Truncate(time.Second).Add(-time.Hour)
		a, b := create(t, ns, "a"), create(t, ns, "b")
		h.Stop()
		record(t, ns, "a", 5, at)
		record(t, ns, "b", 4, at.Add(2*time.Second))
		f := forwarder(t, h, ns, func(c *Config) { c.BatchSize = 3 })

		_, err := f.Pass(context.Background())
		require.Error(t, err, "the hub is down")
		assert.Equal(t, 9.0, testutil.ToFloat64(f.metrics.undelivered))
		assert.Greater(t, testutil.ToFloat64(f.metrics.lag), 3000.0, "the oldest is an hour old")
		assert.Equal(t, 1.0, testutil.ToFloat64(f.metrics.batches.WithLabelValues("failed")))

		h.Up(t)
		drain(t, f)
		got := h.Audit(t, url.Values{"cluster": {"east"}})
		require.Len(t, got, 9)
		assert.Equal(t, want("a", 1, 5), messages(got, "a"))
		assert.Equal(t, want("b", 1, 4), messages(got, "b"))
		assert.Equal(t, 0.0, testutil.ToFloat64(f.metrics.undelivered))
		assert.Equal(t, 0.0, testutil.ToFloat64(f.metrics.lag))
		assert.Equal(t, 3.0, testutil.ToFloat64(f.metrics.batches.WithLabelValues("delivered")), "9 actions in batches of 3")
		assert.Equal(t, map[string]string{string(a.UID): "5", string(b.UID): "4"}, cursors(t, ns))
		assert.Equal(t, 9.0, h.ActionsTotal(t, "east", "blocked", "NoPolicy", ""))
		cl := h.Clusters(t)
		require.Len(t, cl, 2)
		require.NotNil(t, cl[0].Leader)
		assert.Equal(t, "kerf-leader-a", cl[0].Leader.Identity)

		// More actions; a new leader whose cursors are older than what
		// the hub has (its predecessor stopped before writing them).
		record(t, ns, "a", 2, at.Add(time.Minute))
		c := controlplane.Get(t).Client
		var cm corev1.ConfigMap
		require.NoError(t, c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: CursorConfigMap}, &cm))
		cm.Data, cm.BinaryData = map[string]string{string(a.UID): "2"}, nil
		require.NoError(t, c.Update(context.Background(), &cm))
		g := forwarder(t, h, ns, func(c *Config) { c.Identity = "kerf-leader-b" })
		drain(t, g)

		got = h.Audit(t, url.Values{"cluster": {"east"}})
		require.Len(t, got, 11, "each action once")
		assert.Equal(t, want("a", 1, 7), messages(got, "a"))
		assert.Equal(t, want("b", 1, 4), messages(got, "b"))
		assert.Equal(t, 11.0, h.ActionsTotal(t, "east", "blocked", "NoPolicy", ""), "resent actions are not counted again")
		assert.Equal(t, map[string]string{string(a.UID): "7", string(b.UID): "4"}, cursors(t, ns))
		assert.Empty(t, h.Audit(t, url.Values{"cluster": {"west"}}))
	})
}

// TestADeletedRecommendationIsKeptUntilItsActionsAreDelivered deletes a
// recommendation whose actions the hub (down) does not have: its finalizer
// keeps it until they are delivered, then lets it go.
func TestADeletedRecommendationIsKeptUntilItsActionsAreDelivered(t *testing.T) {
	eachBackend(t, func(t *testing.T, h *hubtest.Hub) {
		ns := namespace(t)
		c := controlplane.Get(t).Client
		ctx := context.Background()
		h.Stop()
		rsr := create(t, ns, "gone")
		f := forwarder(t, h, ns)
		_, err := f.Pass(ctx)
		require.Error(t, err)
		var got v1alpha1.RightsizingRecommendation
		require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(rsr), &got))
		assert.Contains(t, got.Finalizers, Finalizer, "added at first sight")

		record(t, ns, "gone", 3, time.Now().UTC().Truncate(time.Second))
		require.NoError(t, c.Delete(ctx, rsr))
		_, err = f.Pass(ctx)
		require.Error(t, err)
		require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(rsr), &got), "kept while undelivered")
		assert.NotNil(t, got.DeletionTimestamp)

		h.Up(t)
		drain(t, f)
		_, err = f.Pass(ctx) // sees it delivered: lets it go
		require.NoError(t, err)
		require.Eventually(t, func() bool {
			return apierrors.IsNotFound(c.Get(ctx, client.ObjectKeyFromObject(rsr), &got))
		}, 10*time.Second, 50*time.Millisecond, "the finalizer was not removed")
		assert.Equal(t, want("gone", 1, 3), messages(h.Audit(t, url.Values{"cluster": {"east"}}), "gone"))
		assert.Equal(t, 0.0, testutil.ToFloat64(f.metrics.dropped.WithLabelValues("deleted")))
		_, err = f.Pass(ctx)
		require.NoError(t, err)
		assert.NotContains(t, cursors(t, ns), string(rsr.UID), "the cursor is forgotten with it")
	})
}

// TestActionsTrimmedOrHeldPastTheBoundAreCountedAsDropped: actions pushed
// out of the 100-entry history before delivery, and a deleted
// recommendation's actions once FinalizerTimeout has passed, are dropped
// and counted.
func TestActionsTrimmedOrHeldPastTheBoundAreCountedAsDropped(t *testing.T) {
	controlplane.Get(t)
	h := hubtest.Start(t, hubtest.SQLite(t), "east")
	ns := namespace(t)
	ctx := context.Background()
	c := controlplane.Get(t).Client
	now := time.Now().UTC().Truncate(time.Second)
	h.Stop()
	create(t, ns, "busy")
	record(t, ns, "busy", 105, now.Add(-time.Hour))
	stale := create(t, ns, "stale")
	f := forwarder(t, h, ns, func(c *Config) {
		c.FinalizerTimeout = time.Hour
		c.Now = func() time.Time { return now }
	})
	_, err := f.Pass(ctx)
	require.Error(t, err)
	assert.Equal(t, 5.0, testutil.ToFloat64(f.metrics.dropped.WithLabelValues("trimmed")), "seq 1 to 5 left the history undelivered")
	assert.Equal(t, 100.0, testutil.ToFloat64(f.metrics.undelivered))

	record(t, ns, "stale", 2, now)
	require.NoError(t, c.Delete(ctx, stale))
	_, err = f.Pass(ctx)
	require.Error(t, err)
	require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(stale), stale), "kept within the bound")
	now = now.Add(61 * time.Minute)
	_, err = f.Pass(ctx)
	require.Error(t, err)
	assert.Equal(t, 2.0, testutil.ToFloat64(f.metrics.dropped.WithLabelValues("deleted")))
	require.Eventually(t, func() bool { return apierrors.IsNotFound(c.Get(ctx, client.ObjectKeyFromObject(stale), stale)) },
		10*time.Second, 50*time.Millisecond, "let go past the bound")

	h.Up(t)
	drain(t, f)
	got := h.Audit(t, url.Values{})
	assert.Equal(t, want("busy", 6, 105), messages(got, "busy"))
	assert.Empty(t, messages(got, "stale"))
	assert.Equal(t, 5.0, testutil.ToFloat64(f.metrics.dropped.WithLabelValues("trimmed")), "counted once")
}

func TestConfigRefusesWhatCannotWork(t *testing.T) {
	for _, c := range []Config{
		{URL: "http://hub:9443", TokenFile: "t", Cluster: "east"},
		{URL: "https://", TokenFile: "t", Cluster: "east"},
		{URL: "https://hub:9443", Cluster: "east"},
		{URL: "https://hub:9443", TokenFile: "t"},
	} {
		assert.Error(t, c.Validate(), "%+v", c)
	}
	assert.NoError(t, (&Config{URL: "https://hub:9443", TokenFile: "t", Cluster: "east"}).Validate())
}

func TestSeqOfNumbersAHistoryWithoutSeqByPosition(t *testing.T) {
	old := []v1alpha1.Action{{}, {}, {}}
	assert.Equal(t, int64(3), SeqOf(old, 2))
	numbered := []v1alpha1.Action{{Seq: 7}, {Seq: 8}}
	assert.Equal(t, int64(8), SeqOf(numbered, 1))
	assert.Equal(t, "u-1/8", Key("u-1", 8))
}
