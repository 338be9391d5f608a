package cert

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/kerf-dev/kerf/internal/kube"
	"github.com/kerf-dev/kerf/test/controlplane"
)

// pems is what EnsureSelfManaged returns.
type pems struct{ cert, key, ca []byte }

// barrier holds the first n callers until all n have arrived, so that
// concurrent callers really overlap.
type barrier struct {
	n       int32
	arrived atomic.Int32
	open    chan struct{}
}

func newBarrier(n int32) *barrier { return &barrier{n: n, open: make(chan struct{})} }

func (b *barrier) wait(ctx context.Context) {
	if b.arrived.Add(1) == b.n {
		close(b.open)
	}
	select {
	case <-b.open:
	case <-ctx.Done():
	}
}

// racingClient returns a client on the control plane whose Create and
// Update calls wait for each other (two of each), and records their errors.
func racingClient(t *testing.T, errs *sync.Map) client.Client {
	t.Helper()
	wc, err := client.NewWithWatch(controlplane.Get(t).Config, client.Options{Scheme: kube.Scheme})
	require.NoError(t, err)
	creates, updates := newBarrier(2), newBarrier(2)
	var seq atomic.Int64
	return interceptor.NewClient(wc, interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			creates.wait(ctx)
			err := c.Create(ctx, obj, opts...)
			errs.Store(seq.Add(1), err)
			return err
		},
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			updates.wait(ctx)
			err := c.Update(ctx, obj, opts...)
			errs.Store(seq.Add(1), err)
			return err
		},
	})
}

// ensureConcurrently runs EnsureSelfManaged from two replicas at once.
func ensureConcurrently(t *testing.T, c client.Client, opts Options) [2]pems {
	t.Helper()
	var out [2]pems
	var wg sync.WaitGroup
	for i := range out {
		wg.Go(func() {
			cert, key, ca, err := EnsureSelfManaged(context.Background(), c, opts)
			assert.NoError(t, err)
			out[i] = pems{cert, key, ca}
		})
	}
	wg.Wait()
	return out
}

func countErrs(errs *sync.Map, is func(error) bool) (n int) {
	errs.Range(func(_, v any) bool {
		if err, _ := v.(error); err != nil && is(err) {
			n++
		}
		return true
	})
	return n
}

func certOptions(secret string) Options {
	return Options{Namespace: "default", ServiceName: "kerf-webhook", SecretName: secret, ExtraHosts: []string{"127.0.0.1"}}
}

// TestSelfManagedCertRaceAgreesOnOneCA starts two replicas at once on an
// empty cluster: both generate a CA, one's Create loses with AlreadyExists,
// and both return the winner's certificate, which the Secret holds.
func TestSelfManagedCertRaceAgreesOnOneCA(t *testing.T) {
	var errs sync.Map
	c := racingClient(t, &errs)
	opts := certOptions(controlplane.UniqueName("race"))

	got := ensureConcurrently(t, c, opts)

	assert.Equal(t, 1, countErrs(&errs, apierrors.IsAlreadyExists), "exactly one create lost the race")
	assert.Equal(t, got[0].ca, got[1].ca, "same CA")
	assert.Equal(t, got[0].cert, got[1].cert, "same serving certificate")
	assert.Equal(t, got[0].key, got[1].key, "same key")
	var s corev1.Secret
	require.NoError(t, controlplane.Get(t).Client.Get(context.Background(), client.ObjectKey{Namespace: opts.Namespace, Name: opts.SecretName}, &s))
	assert.Equal(t, corev1.SecretTypeTLS, s.Type)
	assert.Equal(t, got[0].ca, s.Data[SecretCAKey])
	assert.Equal(t, got[0].cert, s.Data[corev1.TLSCertKey])
	assertServes(t, got[0], time.Now(), "kerf-webhook.default.svc", "127.0.0.1")
}

// TestSelfManagedCertRenewalRaceAgrees moves the clock to the serving
// certificate's renewal time for two replicas at once: one renews, the
// other's update conflicts and it takes the renewed certificate; the CA
// stays.
func TestSelfManagedCertRenewalRaceAgrees(t *testing.T) {
	opts := certOptions(controlplane.UniqueName("renew-race"))
	_, _, ca, err := EnsureSelfManaged(context.Background(), controlplane.Get(t).Client, opts)
	require.NoError(t, err)

	var errs sync.Map
	later := time.Now().Add(DefaultCertValidity - DefaultRenewBefore + time.Hour)
	opts.Now = func() time.Time { return later }
	got := ensureConcurrently(t, racingClient(t, &errs), opts)

	assert.Equal(t, 1, countErrs(&errs, apierrors.IsConflict), "exactly one update lost the race")
	assert.Equal(t, got[0], got[1])
	assert.Equal(t, ca, got[0].ca, "the CA stays")
	assertServes(t, got[0], later, "kerf-webhook.default.svc")
}

// TestSelfManagedCertRenewal checks when the Secret is left alone and when
// its content is replaced.
func TestSelfManagedCertRenewal(t *testing.T) {
	c := controlplane.Get(t).Client
	ctx := context.Background()
	opts := certOptions(controlplane.UniqueName("renew"))
	key := client.ObjectKey{Namespace: opts.Namespace, Name: opts.SecretName}
	first := ensure(t, c, opts)
	rv := secretVersion(t, c, key)

	t.Run("valid: reused as is", func(t *testing.T) {
		assert.Equal(t, first, ensure(t, c, opts))
		assert.Equal(t, rv, secretVersion(t, c, key), "the Secret is not written")
	})
	t.Run("new host: reissued by the same CA", func(t *testing.T) {
		o := opts
		o.ExtraHosts = append([]string{"kerf-webhook.example"}, o.ExtraHosts...)
		got := ensure(t, c, o)
		assert.Equal(t, first.ca, got.ca)
		assert.NotEqual(t, first.cert, got.cert)
		assertServes(t, got, time.Now(), "kerf-webhook.example", "kerf-webhook.default.svc")
	})
	t.Run("CA near expiry: new CA, old one still trusted", func(t *testing.T) {
		late := time.Now().Add(DefaultCAValidity - DefaultRenewBefore + time.Hour)
		o := opts
		o.Now = func() time.Time { return late }
		got := ensure(t, c, o)
		cas, err := parseCerts(got.ca)
		require.NoError(t, err)
		require.Len(t, cas, 2, "new CA first, then the old")
		old, err := parseCerts(first.ca)
		require.NoError(t, err)
		assert.Equal(t, old[0].Raw, cas[1].Raw)
		assert.True(t, cas[0].NotAfter.After(late.Add(DefaultCAValidity-time.Hour)))
		assertServes(t, got, late, "kerf-webhook.default.svc")
		// A replica still serving the old CA's certificate stays trusted.
		assertServes(t, pems{first.cert, first.key, got.ca}, time.Now(), "kerf-webhook.default.svc")
	})
	t.Run("unreadable Secret: regenerated", func(t *testing.T) {
		var s corev1.Secret
		require.NoError(t, c.Get(ctx, key, &s))
		s.Data[SecretCAPrivateKey] = []byte("not a key")
		require.NoError(t, c.Update(ctx, &s))
		got := ensure(t, c, opts)
		assert.NotEqual(t, first.ca, got.ca)
		assertServes(t, got, time.Now(), "kerf-webhook.default.svc")
	})
	t.Run("options are checked", func(t *testing.T) {
		_, _, _, err := EnsureSelfManaged(ctx, c, Options{Namespace: "default"})
		assert.ErrorContains(t, err, "serviceName")
	})
}

// TestPatchCABundleWritesOnlyOnChange checks that the caBundle is set on
// every webhook and an equal one is not rewritten.
func TestPatchCABundleWritesOnlyOnChange(t *testing.T) {
	c := controlplane.Get(t).Client
	ctx := context.Background()
	cfg := webhookConfiguration(controlplane.UniqueName("cabundle"))
	require.NoError(t, c.Create(ctx, cfg))
	_, _, ca, err := EnsureSelfManaged(ctx, c, certOptions(controlplane.UniqueName("cabundle")))
	require.NoError(t, err)

	require.NoError(t, PatchCABundle(ctx, c, cfg.Name, ca))
	require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(cfg), cfg))
	assert.Equal(t, ca, cfg.Webhooks[0].ClientConfig.CABundle)
	rv := cfg.ResourceVersion

	require.NoError(t, PatchCABundle(ctx, c, cfg.Name, ca))
	require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(cfg), cfg))
	assert.Equal(t, rv, cfg.ResourceVersion, "an equal caBundle is not rewritten")

	err = PatchCABundle(ctx, c, "absent", ca)
	assert.True(t, apierrors.IsNotFound(err), "a missing configuration is an error: %v", err)
}

func ensure(t *testing.T, c client.Client, opts Options) pems {
	t.Helper()
	cert, key, ca, err := EnsureSelfManaged(context.Background(), c, opts)
	require.NoError(t, err)
	return pems{cert, key, ca}
}

func secretVersion(t *testing.T, c client.Client, key client.ObjectKey) string {
	t.Helper()
	var s corev1.Secret
	require.NoError(t, c.Get(context.Background(), key, &s))
	return s.ResourceVersion
}

// assertServes checks that the key pair loads and that the certificate
// verifies against the CA bundle for each host at time at.
func assertServes(t *testing.T, p pems, at time.Time, hosts ...string) {
	t.Helper()
	pair, err := tls.X509KeyPair(p.cert, p.key)
	require.NoError(t, err, "key pair")
	roots := x509.NewCertPool()
	require.True(t, roots.AppendCertsFromPEM(p.ca), "CA bundle")
	for _, h := range hosts {
		_, err := pair.Leaf.Verify(x509.VerifyOptions{DNSName: h, Roots: roots, CurrentTime: at})
		assert.NoError(t, err, "verify for %s", h)
	}
}

// TestFileReloadsChangedFiles checks the user-supplied
// certificate directory: a changed pair is served from the next handshake,
// and a broken one leaves the previous pair in service.
func TestFileReloadsChangedFiles(t *testing.T) {
	dir := t.TempDir()
	opts, err := certOptions("files").withDefaults()
	require.NoError(t, err)
	write := func(certPEM, keyPEM []byte, mtime time.Time) {
		t.Helper()
		for name, b := range map[string][]byte{corev1.TLSCertKey: certPEM, corev1.TLSPrivateKeyKey: keyPEM} {
			p := filepath.Join(dir, name)
			require.NoError(t, os.WriteFile(p, b, 0o600))
			require.NoError(t, os.Chtimes(p, mtime, mtime))
		}
	}
	serial := func(f *File) string {
		t.Helper()
		c, err := f.GetCertificate(&tls.ClientHelloInfo{})
		require.NoError(t, err)
		return c.Leaf.SerialNumber.String()
	}
	b1, err := newBundle(opts, nil)
	require.NoError(t, err)
	b2, err := newBundle(opts, nil)
	require.NoError(t, err)
	t0 := time.Now().Add(-time.Hour)

	_, err = NewFile(dir, testLogger(t))
	require.Error(t, err, "no files yet")

	write(b1.certPEM, b1.keyPEM, t0)
	f, err := NewFile(dir, testLogger(t))
	require.NoError(t, err)
	first := serial(f)
	assert.Equal(t, first, serial(f), "unchanged files are not reloaded")

	write(b2.certPEM, b2.keyPEM, t0.Add(time.Minute))
	second := serial(f)
	assert.NotEqual(t, first, second, "the new pair is served")

	write([]byte("garbage"), b2.keyPEM, t0.Add(2*time.Minute))
	assert.Equal(t, second, serial(f), "a broken pair keeps the previous one")

	write(b1.certPEM, b1.keyPEM, t0.Add(3*time.Minute))
	assert.Equal(t, first, serial(f), "a fixed pair is served again")
}

// TestSelfManagedFollowsTheSecret checks the serving side: the
// constructor patches the caBundle, and Run picks up a certificate another
// replica wrote (here: a regeneration after the CA key was lost) and
// patches the new CA bundle in.
func TestSelfManagedFollowsTheSecret(t *testing.T) {
	c := controlplane.Get(t).Client
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cfg := webhookConfiguration(controlplane.UniqueName("follow"))
	require.NoError(t, c.Create(ctx, cfg))
	opts := certOptions(controlplane.UniqueName("follow"))
	opts.WebhookConfiguration = cfg.Name

	s, err := NewSelfManaged(ctx, c, opts, testLogger(t))
	require.NoError(t, err)
	caBundle := func() []byte {
		var got = cfg.DeepCopy()
		require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(cfg), got))
		return got.Webhooks[0].ClientConfig.CABundle
	}
	assert.Equal(t, s.CABundle(), caBundle(), "the constructor patched the caBundle")
	first, err := s.GetCertificate(nil)
	require.NoError(t, err)

	// Another replica regenerates the Secret's content.
	var secret corev1.Secret
	require.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: opts.Namespace, Name: opts.SecretName}, &secret))
	secret.Data[SecretCAPrivateKey] = nil
	require.NoError(t, c.Update(ctx, &secret))
	other := ensure(t, c, opts)

	ran := make(chan struct{})
	go func() { s.Run(ctx, 50*time.Millisecond); close(ran) }()
	defer func() { cancel(); <-ran }()
	require.Eventually(t, func() bool {
		cur, _ := s.GetCertificate(nil)
		return string(cur.Certificate[0]) != string(first.Certificate[0])
	}, 10*time.Second, 20*time.Millisecond, "Run never loaded the new certificate")
	cur, _ := s.GetCertificate(nil)
	assert.Equal(t, other.cert, pemCert(cur.Certificate[0]))
	require.Eventually(t, func() bool { return string(caBundle()) == string(other.ca) },
		10*time.Second, 20*time.Millisecond, "Run never patched the new CA bundle")
}
