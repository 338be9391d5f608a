package node

import (
	"context"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"
)

func TestDecodePodReadsTheKubeletsEncoding(t *testing.T) {
	p := podOn("n1", "web", "6f1c9e2a-3b4d-4e5f-8a9b-0c1d2e3f4a5b", true)
	data, err := p.Marshal() // what the kubelet's PodsServer sends
	require.NoError(t, err)
	got, err := decodePod(data)
	require.NoError(t, err)
	assert.Equal(t, p.UID, got.UID)
	assert.Equal(t, p.Status.ContainerStatuses[0].ContainerID, got.Status.ContainerStatuses[0].ContainerID)

	_, err = decodePod(nil)
	assert.ErrorContains(t, err, "no pod")
	_, err = decodePod([]byte{0xff, 0xff})
	assert.ErrorContains(t, err, "decode pod")
	noUID, err := (&corev1.Pod{}).Marshal()
	require.NoError(t, err)
	_, err = decodePod(noUID)
	assert.ErrorContains(t, err, "metadata.uid")
}

func TestProbePodsAPISaysWhyNot(t *testing.T) {
	dir := t.TempDir()
	err := ProbePodsAPI(context.Background(), filepath.Join(dir, "absent.sock"), time.Second)
	assert.ErrorContains(t, err, "no such file")

	// A socket nobody answers on within the timeout.
	sock := filepath.Join(dir, "silent.sock")
	l, err := net.Listen("unix", sock)
	require.NoError(t, err)
	defer l.Close()
	err = ProbePodsAPI(context.Background(), sock, 300*time.Millisecond)
	assert.ErrorContains(t, err, sock)
}

// agentForDiscovery is an Agent with just what chooseDiscovery needs.
func agentForDiscovery() *Agent { return &Agent{log: testLog(), sampler: &Sampler{}} }

func TestChooseDiscovery(t *testing.T) {
	absent := filepath.Join(t.TempDir(), "pods-api.sock")
	// The informer does not run here: an unconnected client will do.
	kube := func() (*rest.Config, error) { return &rest.Config{Host: "https://127.0.0.1:1"}, nil }
	tests := []struct {
		name    string
		cfg     Config
		want    string
		wantErr string
	}{
		{name: "auto without the kubelet's socket falls back to the informer",
			cfg: Config{PodsAPISocket: absent, NodeName: "n1", Kube: kube}, want: DiscoveryAPIServer},
		{name: "auto with neither runs none",
			cfg: Config{PodsAPISocket: absent}, want: ""},
		{name: "kubelet is taken even before its socket answers",
			cfg: Config{Discovery: DiscoveryKubelet, PodsAPISocket: absent}, want: DiscoveryKubelet},
		{name: "apiserver needs a node name",
			cfg: Config{Discovery: DiscoveryAPIServer, Kube: kube}, wantErr: "--node-name"},
		{name: "unknown mode names the flag",
			cfg: Config{Discovery: "cri"}, wantErr: `--discovery "cri": must be one of auto, kubelet, apiserver`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := agentForDiscovery()
			reg := prometheus.NewRegistry()
			err := a.chooseDiscovery(tt.cfg, reg)
			if tt.wantErr != "" {
				assert.ErrorContains(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, a.Discovery())
			for _, s := range []string{DiscoveryKubelet, DiscoveryAPIServer} {
				want := 0.0
				if s == tt.want {
					want = 1
				}
				assert.Equal(t, want, testutil.ToFloat64(a.discoveryGauge.WithLabelValues(s)), s)
			}
		})
	}
}
