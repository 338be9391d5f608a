package sandbox

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// layout names every path under a sandbox's state directory.
type layout struct {
	state string
}

func (l layout) logs() string               { return filepath.Join(l.state, "logs") }
func (l layout) run() string                { return filepath.Join(l.state, "run") }
func (l layout) pki() string                { return filepath.Join(l.state, "pki") }
func (l layout) pkiFile(name string) string { return filepath.Join(l.state, "pki", name) }
func (l layout) etcdData() string           { return filepath.Join(l.state, "etcd") }
func (l layout) kubeconfigFor(user string) string {
	return filepath.Join(l.state, "kubeconfigs", user+".kubeconfig")
}
func (l layout) adminKubeconfig() string    { return filepath.Join(l.state, "kubeconfig") }
func (l layout) admissionConfig() string    { return filepath.Join(l.state, "admission.yaml") }
func (l layout) containerdDir() string      { return filepath.Join(l.state, "containerd") }
func (l layout) containerdConfig() string   { return filepath.Join(l.state, "containerd", "config.toml") }
func (l layout) containerdSocket() string   { return filepath.Join(l.state, "run", "containerd.sock") }
func (l layout) cniConfDir() string         { return filepath.Join(l.state, "cni", "net.d") }
func (l layout) cniIPAMDir() string         { return filepath.Join(l.state, "cni", "ipam") }
func (l layout) kubeletRoot() string        { return filepath.Join(l.state, "kubelet") }
func (l layout) kubeletConfig() string      { return filepath.Join(l.state, "kubelet-config.yaml") }
func (l layout) kubeletCertDir() string     { return filepath.Join(l.state, "kubelet-pki") }
func (l layout) podLogs() string            { return filepath.Join(l.state, "podlogs") }
func (l layout) podsAPIDir() string         { return filepath.Join(l.kubeletRoot(), "pods-api") }
func (l layout) pidFile(name string) string { return filepath.Join(l.run(), name+".pid") }
func (l layout) logFile(name string) string { return filepath.Join(l.logs(), name+".log") }

// marker files record what Up created outside the state directory, so Down
// removes exactly that.
func (l layout) marker(name string) string { return filepath.Join(l.run(), name) }

const (
	markerHostPaths = "created-host-paths"
	markerBridge    = "created-bridge"
	markerKubepods  = "created-kubepods"
	markerBinDir    = "bin-dir"
)

// containerdConfig is containerd's own configuration: everything (root,
// state, sockets, runc state, network namespaces) under the state
// directory, so it never meets another containerd on the machine.
// restrict_oom_score_adj is required: root here lacks CAP_SYS_RESOURCE, so
// runc cannot lower oom_score_adj and every sandbox fails without it.
func containerdConfig(l layout) string {
	r := strings.NewReplacer("$STATE", l.state, "$SOCK", l.containerdSocket(),
		"$PAUSE", PauseImageRef, "$CNIBIN", cniBinDir, "$CNICONF", l.cniConfDir())
	return r.Replace(`version = 2
root = "$STATE/containerd/root"
state = "$STATE/containerd/state"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper"]
[grpc]
  address = "$SOCK"
[ttrpc]
  address = "$SOCK.ttrpc"
[debug]
  address = "$STATE/run/containerd-debug.sock"
  level = "info"
[plugins."io.containerd.internal.v1.opt"]
  path = "$STATE/containerd/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$PAUSE"
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        BinaryName = "/usr/sbin/runc"
        Root = "$STATE/runc"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "$CNIBIN"
    conf_dir = "$CNICONF"
`)
}

// cniConfig is the bridge network: bridge kerf0 with the node's address as
// gateway, host-local IPAM keeping its leases in the state directory, and
// hostPorts.
func cniConfig(l layout) string {
	return bridgeConflist("kerf-sandbox", PodCIDR, NodeIP, l.cniIPAMDir(), true)
}

// bridgeConflist is a node's CNI configuration: a bridge named BridgeName
// routing subnet with gateway as the pods' default route, no masquerade
// (each node's pod range is routed to it), host-local IPAM (its leases in
// dataDir, or its default directory when empty) and, with portmap, the
// portmap plugin for hostPorts.
func bridgeConflist(name, subnet, gateway, dataDir string, portmap bool) string {
	type rng struct {
		Subnet  string `json:"subnet"`
		Gateway string `json:"gateway"`
	}
	ipam := map[string]any{
		"type":   "host-local",
		"ranges": [][]rng{{{Subnet: subnet, Gateway: gateway}}},
		"routes": []map[string]string{{"dst": "0.0.0.0/0"}},
	}
	if dataDir != "" {
		ipam["dataDir"] = dataDir
	}
	plugins := []map[string]any{{
		"type": "bridge", "bridge": BridgeName, "isGateway": true, "ipMasq": false, "hairpinMode": true, "ipam": ipam,
	}}
	if portmap {
		plugins = append(plugins, map[string]any{"type": "portmap", "capabilities": map[string]bool{"portMappings": true}})
	}
	raw, err := json.MarshalIndent(map[string]any{"cniVersion": "0.4.0", "name": name, "plugins": plugins}, "", "  ")
	if err != nil {
		panic(err) // maps of strings, bools and slices of them always marshal
	}
	return string(raw) + "\n"
}

// kubeletConfig is the KubeletConfiguration known to work on these
// machines (cgroup v1, cgroupfs, swap on), with x509 and webhook
// authentication so the apiserver (logs, exec) and nothing else gets in.
func kubeletConfig(l layout) string {
	r := strings.NewReplacer("$SOCK", l.containerdSocket(), "$PODLOGS", l.podLogs(),
		"$NODEIP", NodeIP, "$PORT", strconv.Itoa(KubeletPort), "$HEALTHZ", strconv.Itoa(kubeletHealthzPort),
		"$CA", l.pkiFile("ca.crt"), "$CRT", l.pkiFile("kubelet-serving.crt"), "$KEY", l.pkiFile("kubelet-serving.key"))
	return r.Replace(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: cgroupfs
failCgroupV1: false
failSwapOn: false
containerRuntimeEndpoint: unix://$SOCK
imageServiceEndpoint: unix://$SOCK
address: $NODEIP
port: $PORT
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $HEALTHZ
podLogsDir: $PODLOGS
tlsCertFile: $CRT
tlsPrivateKeyFile: $KEY
rotateCertificates: false
serverTLSBootstrap: false
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: true
  x509:
    clientCAFile: $CA
authorization:
  mode: Webhook
staticPodPath: ""
clusterDomain: cluster.local
syncFrequency: 10s
nodeStatusUpdateFrequency: 10s
evictionHard:
  memory.available: "100Mi"
  nodefs.available: "2%"
  imagefs.available: "2%"
  nodefs.inodesFree: "2%"
imageGCHighThresholdPercent: 99
imageGCLowThresholdPercent: 98
resolvConf: /etc/resolv.conf
`)
}

// writeKubeconfig writes a kubeconfig for the client certificate user
// (pki/<user>.crt), embedding the certificates so the file stands alone.
func writeKubeconfig(l layout, path, user string) error {
	ca, err := os.ReadFile(l.pkiFile("ca.crt"))
	if err != nil {
		return err
	}
	crt, err := os.ReadFile(l.pkiFile(user + ".crt"))
	if err != nil {
		return err
	}
	key, err := os.ReadFile(l.pkiFile(user + ".key"))
	if err != nil {
		return err
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["kerf-sandbox"] = &clientcmdapi.Cluster{Server: APIServerURL, CertificateAuthorityData: ca}
	cfg.AuthInfos[user] = &clientcmdapi.AuthInfo{ClientCertificateData: crt, ClientKeyData: key}
	cfg.Contexts["kerf-sandbox"] = &clientcmdapi.Context{Cluster: "kerf-sandbox", AuthInfo: user}
	cfg.CurrentContext = "kerf-sandbox"
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return fmt.Errorf("write kubeconfig %s: %w", path, err)
	}
	return nil
}

// writeConfigs writes the certificates, kubeconfigs and every component's
// configuration file under the state directory.
func writeConfigs(l layout, node string) error {
	for _, d := range []string{l.logs(), l.run(), l.etcdData(), l.containerdDir(), l.cniConfDir(),
		l.cniIPAMDir(), l.kubeletRoot(), l.kubeletCertDir(), l.podLogs(), l.podsAPIDir()} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return fmt.Errorf("create %s: %w", d, err)
		}
	}
	if err := writePKI(l.pki(), node); err != nil {
		return err
	}
	for _, user := range []string{"admin", "kubelet-client", "kube-controller-manager", "kube-scheduler", "kube-proxy"} {
		if err := writeKubeconfig(l, l.kubeconfigFor(user), user); err != nil {
			return err
		}
	}
	if err := writeWebhookClientKubeconfig(l); err != nil {
		return err
	}
	files := map[string]string{
		l.containerdConfig():                              containerdConfig(l),
		filepath.Join(l.cniConfDir(), "10-kerf.conflist"): cniConfig(l),
		l.kubeletConfig():                                 kubeletConfig(l),
		l.admissionConfig():                               admissionConfig(l),
	}
	for path, content := range files {
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			return fmt.Errorf("write %s: %w", path, err)
		}
	}
	return nil
}

// admissionConfig hands the apiserver's webhook client certificate to both
// webhook admission plugins, as docs/install.md asks of a production
// apiserver: kerf-leader's webhook refuses callers without it.
func admissionConfig(l layout) string {
	kc := l.kubeconfigFor("apiserver-webhook-client")
	return `apiVersion: apiserver.config.k8s.io/v1
kind: AdmissionConfiguration
plugins:
  - name: MutatingAdmissionWebhook
    configuration:
      apiVersion: apiserver.config.k8s.io/v1
      kind: WebhookAdmissionConfiguration
      kubeConfigFile: ` + kc + `
  - name: ValidatingAdmissionWebhook
    configuration:
      apiVersion: apiserver.config.k8s.io/v1
      kind: WebhookAdmissionConfiguration
      kubeConfigFile: ` + kc + `
`
}

// writeWebhookClientKubeconfig writes the kubeconfig of admissionConfig:
// the client certificate pki/apiserver-webhook-client for every webhook
// ("*": a webhook's Service, host or URL).
func writeWebhookClientKubeconfig(l layout) error {
	crt, err := os.ReadFile(l.pkiFile("apiserver-webhook-client.crt"))
	if err != nil {
		return err
	}
	key, err := os.ReadFile(l.pkiFile("apiserver-webhook-client.key"))
	if err != nil {
		return err
	}
	cfg := clientcmdapi.NewConfig()
	cfg.AuthInfos["*"] = &clientcmdapi.AuthInfo{ClientCertificateData: crt, ClientKeyData: key}
	path := l.kubeconfigFor("apiserver-webhook-client")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return fmt.Errorf("write kubeconfig %s: %w", path, err)
	}
	return nil
}
