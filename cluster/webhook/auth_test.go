package webhook

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/test/controlplane"
)

// testCA signs the certificates of the authentication tests.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newTestCA(t *testing.T, name string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true, IsCA: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	require.NoError(t, err)
	cert, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	return &testCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// issue signs a certificate for cn: a serving one for 127.0.0.1, or a
// client one.
func (ca *testCA) issue(t *testing.T, cn string, server bool) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	if server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tmpl.IPAddresses = []net.IP{net.ParseIP("127.0.0.1")}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, key.Public(), ca.key)
	require.NoError(t, err)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// post sends body to the webhook at addr over TLS trusting servingCA, with
// the client certificate when one is given, and returns the status code.
func post(addr string, servingCA []byte, clientCert *tls.Certificate, body []byte) (int, []byte, error) {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(servingCA)
	cfg := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	if clientCert != nil {
		cfg.Certificates = []tls.Certificate{*clientCert}
	}
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg}}
	defer hc.CloseIdleConnections()
	resp, err := hc.Post("https://"+addr+Path, "application/json", bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

func TestClientAuthSettingsAreExplicit(t *testing.T) {
	for _, c := range []struct {
		name string
		auth ClientAuth
		want string
	}{
		{"nothing said", ClientAuth{}, "--webhook-client-ca"},
		{"both", ClientAuth{CAFile: "ca.crt", AllowUnauthenticated: true}, "exclude each other"},
		{"names without a CA", ClientAuth{Names: []string{"x"}, AllowUnauthenticated: true}, "--webhook-client-name needs --webhook-client-ca"},
	} {
		err := c.auth.Validate()
		require.Error(t, err, c.name)
		assert.Contains(t, err.Error(), c.want, c.name)
		_, err = c.auth.ServerTLS(&tls.Config{}, testLogger(t))
		assert.Error(t, err, "%s: ServerTLS refuses to serve", c.name)
	}
	_, err := ClientAuth{CAFile: filepath.Join(t.TempDir(), "missing")}.ServerTLS(&tls.Config{}, testLogger(t))
	assert.ErrorContains(t, err, "--webhook-client-ca")
	assert.NoError(t, ClientAuth{AllowUnauthenticated: true}.Validate())
	assert.NoError(t, ClientAuth{CAFile: "ca.crt"}.Validate())
}

// TestOnlyTheNamedClientOfTheCAGetsIn serves the webhook with a client CA
// and a name: no certificate, another CA's certificate with the right name,
// and the CA's certificate of another name (a node's, a user's) are refused
// at the handshake; the named one gets an answer. After the CA file is
// replaced (a rotation), the new CA's certificate gets in and the old one
// no longer does, without a restart.
func TestOnlyTheNamedClientOfTheCAGetsIn(t *testing.T) {
	dir := t.TempDir()
	serving := newTestCA(t, "serving")
	clients := newTestCA(t, "clients")
	caFile := filepath.Join(dir, "ca.crt")
	require.NoError(t, os.WriteFile(caFile, clients.pem, 0o600))

	base := &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{serving.issue(t, "webhook", true)}}
	cfg, err := ClientAuth{CAFile: caFile, Names: []string{DefaultClientName}}.ServerTLS(base, testLogger(t))
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	reached := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) })
	go func() { done <- ServeListener(ctx, ln, cfg, Mux(reached)) }()
	t.Cleanup(func() { cancel(); assert.NoError(t, <-done) })
	addr := ln.Addr().String()

	apiserver := clients.issue(t, DefaultClientName, false)
	node := clients.issue(t, "system:node:n1", false)
	forged := newTestCA(t, "clients").issue(t, DefaultClientName, false)
	for _, c := range []struct {
		name string
		cert *tls.Certificate
		in   bool
	}{
		{"no certificate", nil, false},
		{"another CA's certificate", &forged, false},
		{"the CA's certificate of another name", &node, false},
		{"the apiserver's certificate", &apiserver, true},
	} {
		code, _, err := post(addr, serving.pem, c.cert, []byte("{}"))
		if c.in {
			assert.NoError(t, err, c.name)
			assert.Equal(t, http.StatusNoContent, code, "%s: the request reaches the handler", c.name)
			continue
		}
		require.Error(t, err, "%s: refused", c.name)
		assert.Contains(t, err.Error(), "tls", "%s: refused at the handshake", c.name)
	}

	// A rotation: the file now holds another CA.
	rotated := newTestCA(t, "clients-2")
	require.NoError(t, os.WriteFile(caFile, rotated.pem, 0o600))
	future := time.Now().Add(time.Minute) // a new modification time, whatever the file system's resolution
	require.NoError(t, os.Chtimes(caFile, future, future))
	newAPIServer := rotated.issue(t, DefaultClientName, false)
	_, _, err = post(addr, serving.pem, &newAPIServer, []byte("{}"))
	assert.NoError(t, err, "the rotated CA's certificate gets in")
	_, _, err = post(addr, serving.pem, &apiserver, []byte("{}"))
	assert.Error(t, err, "the old CA's certificate no longer does")
}

// TestAForgedReviewIsRefusedAtTheHandshake sends, directly to the webhook
// the real apiserver calls, the AdmissionReview a pod of another namespace's
// workload would get: without the apiserver's client certificate it is
// refused at TLS, while the apiserver's own calls (startWebhook waited for
// one; here a pod created through it) get the values. A webhook serving
// unauthenticated, as before, answers the forged review with the values.
func TestAForgedReviewIsRefusedAtTheHandshake(t *testing.T) {
	e := startWebhook(t)
	name := controlplane.UniqueName("forged")
	owner := e.workload(t, name, v1alpha1.KindDeployment)
	e.recommendation(t, name, v1alpha1.KindDeployment, v1alpha1.StrategyInPlace,
		[]v1alpha1.ContainerResources{{Name: "app", Requests: &v1alpha1.ResourceValues{CPU: q("275m")}}},
		v1alpha1.RightsizingRecommendationStatus{Phase: v1alpha1.PhaseApplied})

	pod := e.createPod(t, newPod(appNamespace, owner, appContainer()))
	assert.Equal(t, "275m", pod.Spec.Containers[0].Resources.Requests.Cpu().String(), "through the apiserver the webhook answers")

	forgedPod := newPod(appNamespace, owner, appContainer())
	forgedPod.Name = "forged"
	req := podRequest(t, forgedPod)
	req.Namespace = appNamespace
	body, err := json.Marshal(admissionv1.AdmissionReview{TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"}, Request: req})
	require.NoError(t, err)
	_, _, err = post(e.addr, e.servingCA, nil, body)
	require.Error(t, err, "a caller without the apiserver's certificate is refused")
	assert.Contains(t, err.Error(), "tls")

	// The door this closes: the same review to a webhook that serves
	// anyone reads the values back.
	servingCA := newTestCA(t, "serving")
	open, err := ClientAuth{AllowUnauthenticated: true}.ServerTLS(&tls.Config{
		MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{servingCA.issue(t, "webhook", true)}}, testLogger(t))
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ServeListener(ctx, ln, open, Mux(e.injector)) }()
	t.Cleanup(func() { cancel(); <-done })
	code, answer, err := post(ln.Addr().String(), servingCA.pem, nil, body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, code)
	var out admissionv1.AdmissionReview
	require.NoError(t, json.Unmarshal(answer, &out))
	require.NotNil(t, out.Response)
	assert.Contains(t, string(out.Response.Patch), "275m", "unauthenticated, a forged review reads the values")
}

// TestTheTestControlPlanePresentsTheDefaultName keeps the name the test
// apiserver's client certificate carries the one the webhook expects.
func TestTheTestControlPlanePresentsTheDefaultName(t *testing.T) {
	assert.Equal(t, DefaultClientName, controlplane.WebhookClientName)
}
