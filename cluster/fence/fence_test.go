package fence

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kerf-dev/kerf/test/controlplane"
)

// TestMain shares one control plane among the package's tests
// (controlplane.Get): a start costs seconds.
func TestMain(m *testing.M) {
	controlplane.Main(m, controlplane.Hooks{})
}

// namespace creates a fresh namespace for one test.
func namespace(t testing.TB, c client.Client) string {
	t.Helper()
	return controlplane.Namespace(t, c, "kerf-fence-test-")
}

// fenceOnLease is a fence of identity a over the Lease kerf-leader of ns,
// held by a and just renewed, whose live reads go through wrap (nil: as
// they are), and a clientset whose writes it fences, without a client
// rate limit (so that writes arrive together).
func fenceOnLease(t *testing.T, ns string, wrap func(http.RoundTripper) http.RoundTripper) (*Fence, kubernetes.Interface) {
	cp := controlplane.Get(t)
	require.NoError(t, cp.Client.Create(context.Background(), &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "kerf-leader"},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To("a"), RenewTime: &metav1.MicroTime{Time: time.Now()}},
	}))
	readCfg := rest.CopyConfig(cp.Config)
	if wrap != nil {
		readCfg.Wrap(wrap)
	}
	reads, err := kubernetes.NewForConfig(readCfg)
	require.NoError(t, err)
	f := New("a", time.Minute, reads.CoordinationV1().Leases(ns), "kerf-leader", prometheus.NewRegistry(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	f.observe(time.Now(), resourcelock.LeaderElectionRecord{HolderIdentity: "a"}, nil)
	writeCfg := rest.CopyConfig(cp.Config)
	writeCfg.QPS, writeCfg.Burst = -1, 0
	writeCfg.Wrap(f.Wrap)
	writes, err := kubernetes.NewForConfig(writeCfg)
	require.NoError(t, err)
	return f, writes
}

// TestFenceLeaseReadsPerWrite measures the fence's live Lease reads per
// write on a real apiserver: one write at a time costs one read each,
// writes arriving together share reads (each begun after all the writes
// it lets through arrived). Before the reads were shared, 32 writes at
// once cost 32 reads.
func TestFenceLeaseReadsPerWrite(t *testing.T) {
	c := controlplane.Get(t).Client
	ns := namespace(t, c)
	ctx := context.Background()
	f, writes := fenceOnLease(t, ns, nil)
	create := func(name string) error {
		_, err := writes.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
		return err
	}
	const n = 32
	for i := range n {
		require.NoError(t, create(fmt.Sprintf("one-%d", i)))
	}
	sequential := testutil.ToFloat64(f.reads)
	assert.Equal(t, float64(n), sequential, "one write at a time: one read each")

	var wg sync.WaitGroup
	start := make(chan struct{})
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			<-start
			errs[i] = create(fmt.Sprintf("together-%d", i))
		})
	}
	close(start)
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	together := testutil.ToFloat64(f.reads) - sequential
	t.Logf("Lease reads per write: %d writes one at a time: %.0f reads (%.2f per write); %d writes at once: %.0f reads (%.2f per write)",
		n, sequential, sequential/n, n, together, together/n)
	assert.LessOrEqual(t, together, float64(n/4), "writes at once share their reads")
	assert.Zero(t, testutil.ToFloat64(f.refused))
}

// TestFenceSharesNoReadBegunBeforeTheWrite: a write never goes on a read
// of the Lease that was sent before it arrived. Write 1's read is
// answered (a holds the Lease) and held back; the Lease is handed to b;
// write 2 arrives; write 1's read is let go. Write 1 is sent (its read
// began after it arrived), write 2 waits for a read of its own, which
// finds b, and is refused.
func TestFenceSharesNoReadBegunBeforeTheWrite(t *testing.T) {
	c := controlplane.Get(t).Client
	ns := namespace(t, c)
	ctx := context.Background()
	answered, release := make(chan struct{}), make(chan struct{})
	var first sync.Once
	f, writes := fenceOnLease(t, ns, func(rt http.RoundTripper) http.RoundTripper {
		return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
			resp, err := rt.RoundTrip(req)
			first.Do(func() {
				close(answered)
				<-release
			})
			return resp, err
		})
	})
	create := func(name string) error {
		_, err := writes.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
		return err
	}
	done1 := make(chan error, 1)
	go func() { done1 <- create("write-1") }()
	<-answered

	var lease coordinationv1.Lease
	require.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "kerf-leader"}, &lease))
	lease.Spec.HolderIdentity = ptr.To("b")
	require.NoError(t, c.Update(ctx, &lease), "hand the Lease to b")
	done2 := make(chan error, 1)
	go func() { done2 <- create("write-2") }()
	// Write 2 arrives and waits (were it late, it would read on its own
	// and the test pass anyway: it never fails wrongly).
	time.Sleep(300 * time.Millisecond)
	f.readMu.Lock()
	waiting := f.next != nil
	f.readMu.Unlock()
	close(release)

	require.NoError(t, <-done1, "write 1: its read began after it arrived")
	require.ErrorIs(t, <-done2, ErrNotLeading, "write 2: its own read finds b")
	assert.True(t, waiting, "write 2 waited for the next read")
	assert.Equal(t, 2.0, testutil.ToFloat64(f.reads))
	assert.Equal(t, 1.0, testutil.ToFloat64(f.refused))
	_, err := controlplane.Get(t).Clientset.CoreV1().ConfigMaps(ns).Get(ctx, "write-2", metav1.GetOptions{})
	assert.True(t, apierrors.IsNotFound(err), "write 2 never reached the apiserver: %v", err)
}
