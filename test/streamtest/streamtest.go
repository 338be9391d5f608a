// Package streamtest holds what tests of the agents' stream need on both
// ends: a TLS certificate for the leader, pods bound to nodes, and bound
// service-account tokens from a real apiserver.
package streamtest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"io"
	"math/big"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// SelfSigned returns a server TLS configuration for 127.0.0.1 and a pool
// that trusts it.
func SelfSigned(t testing.TB) (*tls.Config, *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "kerf-leader"},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	cert, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &tls.Config{
		Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}},
		MinVersion:   tls.VersionTLS13,
	}, pool
}

// CreatePod creates a pod in namespace bound to node, running as service
// account sa ("" for the default), without an automounted token, with
// the containers named (one "app" when none): the leader's stream takes
// reports only about containers of the pod's spec.
func CreatePod(t testing.TB, cs kubernetes.Interface, namespace, name, node, sa string, containers ...string) *corev1.Pod {
	t.Helper()
	if len(containers) == 0 {
		containers = []string{"app"}
	}
	spec := make([]corev1.Container, len(containers))
	for i, c := range containers {
		spec[i] = corev1.Container{Name: c, Image: "registry.k8s.io/pause:3.10"}
	}
	pod, err := cs.CoreV1().Pods(namespace).Create(t.Context(), &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec: corev1.PodSpec{
			NodeName:                     node,
			ServiceAccountName:           sa,
			AutomountServiceAccountToken: ptr.To(false),
			Containers:                   spec,
		},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	return pod
}

// CreateToken requests a 10-minute token of service account sa with
// audience, bound to pod when pod is not nil.
func CreateToken(t testing.TB, cs kubernetes.Interface, namespace, sa, audience string, pod *corev1.Pod) string {
	t.Helper()
	req := &authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{
		Audiences:         []string{audience},
		ExpirationSeconds: ptr.To[int64](600),
	}}
	if pod != nil {
		req.Spec.BoundObjectRef = &authnv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID}
	}
	tr, err := cs.CoreV1().ServiceAccounts(namespace).CreateToken(t.Context(), sa, req, metav1.CreateOptions{})
	require.NoError(t, err)
	return tr.Status.Token
}

// LogWriter is t.Output() for loggers of servers a test starts: their
// goroutines may still log while the test ends (a stream handler saying
// goodbye), which testing does not allow, so writes stop once the test's
// cleanups run.
func LogWriter(t testing.TB) io.Writer {
	w := &logWriter{out: t.Output()}
	t.Cleanup(func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		w.done = true
	})
	return w
}

type logWriter struct {
	mu   sync.Mutex
	out  io.Writer
	done bool
}

func (w *logWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.done {
		return len(p), nil
	}
	return w.out.Write(p)
}
