package cert

import (
	"context"
	"crypto/tls"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestSourceValidate(t *testing.T) {
	selfManaged := Options{Namespace: "kerf-system", ServiceName: "kerf-webhook", SecretName: "kerf-webhook-cert"}
	cases := []struct {
		name string
		src  Source
		ok   bool
	}{
		{"a directory", Source{Dir: "/etc/kerf/tls"}, true},
		{"a directory wins over incomplete options", Source{Dir: "/etc/kerf/tls", SelfManaged: Options{Namespace: "x"}}, true},
		{"self-managed", Source{SelfManaged: selfManaged}, true},
		{"nothing", Source{}, false},
		{"no Secret", Source{SelfManaged: Options{Namespace: "kerf-system", ServiceName: "kerf-webhook"}}, false},
		{"renewal after expiry", Source{SelfManaged: Options{Namespace: "kerf-system", ServiceName: "kerf-webhook", SecretName: "s",
			CertValidity: time.Hour, RenewBefore: 2 * time.Hour}}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.src.Validate()
			if tc.ok {
				assert.NoError(t, err)
			} else {
				assert.Error(t, err)
			}
		})
	}
}

func TestOptionsDefaultsAndHosts(t *testing.T) {
	o, err := Options{Namespace: "kerf-system", ServiceName: "kerf-leader", SecretName: "s", ExtraHosts: []string{"127.0.0.1"}}.withDefaults()
	require.NoError(t, err)
	assert.Equal(t, DefaultCAValidity, o.CAValidity)
	assert.Equal(t, DefaultCertValidity, o.CertValidity)
	assert.Equal(t, DefaultRenewBefore, o.RenewBefore)
	assert.NotNil(t, o.Now)
	assert.Equal(t, []string{"kerf-leader.kerf-system.svc", "kerf-leader.kerf-system.svc.cluster.local", "127.0.0.1"}, o.Hosts())
}

func TestSourceTLSFromAMissingDirectoryFails(t *testing.T) {
	_, err := Source{Dir: t.TempDir()}.TLS(context.Background(), nil, testLogger(t))
	require.Error(t, err, "no tls.crt and tls.key")
	_, err = Source{SelfManaged: Options{Namespace: "n", ServiceName: "s", SecretName: "x"}}.TLS(context.Background(), nil, testLogger(t))
	require.Error(t, err, "a self-managed certificate needs a client")
}

func TestTLSConfigServesTLS12OrNewer(t *testing.T) {
	want := &tls.Certificate{}
	cfg := TLSConfig(func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return want, nil })
	assert.Equal(t, uint16(tls.VersionTLS12), cfg.MinVersion)
	got, err := cfg.GetCertificate(&tls.ClientHelloInfo{})
	require.NoError(t, err)
	assert.Same(t, want, got)
}
