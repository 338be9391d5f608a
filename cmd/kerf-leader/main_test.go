package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestHubFlagsAreCheckedBeforeTheLeaderStarts: a plaintext URL, a missing
// token file or cluster name, and a CA file without a certificate are
// refused at start, with the flag named.
func TestHubFlagsAreCheckedBeforeTheLeaderStarts(t *testing.T) {
	dir := t.TempDir()
	token := filepath.Join(dir, "token")
	require.NoError(t, os.WriteFile(token, []byte("kerf_x_y\n"), 0o600))
	notPEM := filepath.Join(dir, "ca.crt")
	require.NoError(t, os.WriteFile(notPEM, []byte("not a certificate"), 0o600))

	for _, c := range []struct{ url, token, ca, cluster, want string }{
		{"http://hub:9443", token, "", "east", "must be https"},
		{"https://hub:9443", "", "", "east", "token file"},
		{"https://hub:9443", filepath.Join(dir, "missing"), "", "east", "--hub-token-file"},
		{"https://hub:9443", token, "", "", "cluster name"},
		{"https://hub:9443", token, notPEM, "east", "no PEM certificate"},
	} {
		_, err := hubConfig(c.url, c.token, c.ca, c.cluster)
		require.Error(t, err, "%+v", c)
		assert.Contains(t, err.Error(), c.want)
	}
	hc, err := hubConfig("https://hub:9443", token, "", "east")
	require.NoError(t, err)
	assert.Equal(t, "east", hc.Cluster)
	assert.Nil(t, hc.TLS, "the system's roots")
}
