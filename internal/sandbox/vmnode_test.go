package sandbox

import (
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"
)

func readCert(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	b, _ := pem.Decode(raw)
	require.NotNil(t, b, path)
	c, err := x509.ParseCertificate(b.Bytes)
	require.NoError(t, err)
	return c
}

// The VM node's certificates chain to the sandbox's CA with the names the
// Node authorizer wants and the guest's address for serving.
func TestWriteVMNodePKISignsTheNodesCertificatesWithTheSandboxCA(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, writePKI(dir, DefaultNodeName))
	require.NoError(t, writeVMNodePKI(dir, "kerf-vm"))

	roots := x509.NewCertPool()
	roots.AddCert(readCert(t, filepath.Join(dir, "ca.crt")))

	client := readCert(t, filepath.Join(dir, "vm-kubelet-client.crt"))
	assert.Equal(t, "system:node:kerf-vm", client.Subject.CommonName)
	assert.Equal(t, []string{"system:nodes"}, client.Subject.Organization)
	_, err := client.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	assert.NoError(t, err)

	serving := readCert(t, filepath.Join(dir, "vm-kubelet-serving.crt"))
	_, err = serving.Verify(x509.VerifyOptions{Roots: roots, DNSName: VMNodeIP})
	assert.NoError(t, err, "the apiserver dials the kubelet at the node's InternalIP")
	_, err = os.Stat(filepath.Join(dir, "vm-kubelet-serving.key"))
	assert.NoError(t, err)
}

func TestWriteVMNodePKINeedsTheSandboxCA(t *testing.T) {
	assert.ErrorContains(t, writeVMNodePKI(t.TempDir(), "kerf-vm"), "sandbox CA")
}

// The guest's kubelet keeps the kubelet's defaults where the host node's
// does not: no failCgroupV1, no failSwapOn, no root dir of its own.
func TestVMKubeletConfigKeepsTheKubeletsCgroupDefaults(t *testing.T) {
	var cfg map[string]any
	require.NoError(t, yaml.Unmarshal([]byte(vmKubeletConfig()), &cfg))
	for _, k := range []string{"failCgroupV1", "failSwapOn", "cgroupDriver", "cgroupRoot"} {
		assert.NotContains(t, cfg, k)
	}
	assert.Equal(t, "KubeletConfiguration", cfg["kind"])
	assert.Equal(t, "unix:///run/containerd/containerd.sock", cfg["containerRuntimeEndpoint"])
	assert.Equal(t, map[string]any{"mode": "Webhook"}, cfg["authorization"])
	assert.Equal(t, false, cfg["authentication"].(map[string]any)["anonymous"].(map[string]any)["enabled"])
	assert.Contains(t, vmKubeletArgs("kerf-vm"), "--node-ip="+VMNodeIP)
}

func TestVMCNIConfigUsesTheGuestsPodRange(t *testing.T) {
	var conf struct {
		Plugins []struct {
			Type string `json:"type"`
			IPAM struct {
				Ranges [][]struct {
					Subnet, Gateway string
				} `json:"ranges"`
			} `json:"ipam"`
		} `json:"plugins"`
	}
	require.NoError(t, json.Unmarshal([]byte(vmCNIConfig()), &conf))
	require.Len(t, conf.Plugins, 1)
	assert.Equal(t, "bridge", conf.Plugins[0].Type)
	assert.Equal(t, VMPodCIDR, conf.Plugins[0].IPAM.Ranges[0][0].Subnet)
	assert.Equal(t, VMPodGateway, conf.Plugins[0].IPAM.Ranges[0][0].Gateway)
	assert.NotEqual(t, PodCIDR, VMPodCIDR)
}

func TestWriteVMNodeFilesWritesTheGuestsEtc(t *testing.T) {
	state, root := t.TempDir(), t.TempDir()
	l := layout{state: state}
	require.NoError(t, writePKI(l.pki(), DefaultNodeName))
	require.NoError(t, WriteVMNodeFiles(state, "kerf-vm", root))
	for _, f := range []string{"etc/kerf/kubelet.yaml", "etc/kerf/kubelet.kubeconfig", "etc/kerf/containerd.toml",
		"etc/kerf/ca.crt", "etc/kerf/vm-kubelet-serving.crt", "etc/kerf/vm-kubelet-serving.key", "etc/cni/net.d/10-kerf.conflist"} {
		_, err := os.Stat(filepath.Join(root, f))
		assert.NoError(t, err, f)
	}
	raw, err := os.ReadFile(filepath.Join(root, "etc/kerf/containerd.toml"))
	require.NoError(t, err)
	assert.Contains(t, string(raw), `sandbox_image = "`+PauseImageRef+`"`)
	assert.NotContains(t, string(raw), "restrict_oom_score_adj")
	kc, err := os.ReadFile(filepath.Join(root, "etc/kerf/kubelet.kubeconfig"))
	require.NoError(t, err)
	assert.Contains(t, string(kc), APIServerURL)
}

// guestPanic reads one boot's console: a panic of an earlier boot, before
// the offset, is not this one's.
func TestGuestPanicReadsOneBootsConsole(t *testing.T) {
	console := filepath.Join(t.TempDir(), "vm.log")
	first := "vmnode-mark mounted 3.9\n[ 44.1] " + panicMarker + "softlockup: hung tasks\n[ 44.2] ---[ end " + panicMarker + "softlockup: hung tasks ]---\n"
	require.NoError(t, os.WriteFile(console, []byte(first), 0o644))
	why, ok := guestPanic(console, 0)
	assert.True(t, ok)
	assert.Equal(t, "softlockup: hung tasks", why, "the end marker's reason, without its ]---")

	f, err := os.OpenFile(console, os.O_APPEND|os.O_WRONLY, 0)
	require.NoError(t, err)
	_, err = f.WriteString("vmnode-mark mounted 3.7\nvmnode-mark kubelet-started 8.2\n")
	require.NoError(t, err)
	require.NoError(t, f.Close())
	_, ok = guestPanic(console, int64(len(first)))
	assert.False(t, ok, "the second boot has not panicked")
	_, ok = guestPanic(filepath.Join(t.TempDir(), "none.log"), 0)
	assert.False(t, ok)
}

// The guest's kernel turns a soft lockup into a panic, which ends QEMU
// (-no-reboot), and prints warnings' call traces.
func TestTheVMNodesKernelPanicsOnALockup(t *testing.T) {
	args := strings.Fields(VMKernelArgs)
	assert.Subset(t, args, []string{"softlockup_panic=1", "panic=-1", "loglevel=5"})
	assert.NotContains(t, args, "quiet")
	c := (&resolved{l: layout{state: "/var/tmp/x"}}).vmComponentOf()
	assert.Contains(t, c.args, "-no-reboot")
	assert.Contains(t, c.args, VMKernelArgs)
}
