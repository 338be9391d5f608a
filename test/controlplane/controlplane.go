// Package controlplane starts a real etcd and kube-apiserver for tests: the
// binaries that `make deps` builds from the Go module proxy and caches under
// bin/ (their versions and paths are internal/kube's), run by
// controller-runtime's envtest on free loopback ports in a temporary
// directory. It is test code: no shipped binary imports it.
package controlplane

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/kerf-dev/kerf/internal/kube"
)

// RequireEnv names the environment variable that turns a missing control
// plane from a skipped test into a failed one. `make test` sets it, and so
// does CI (CI=true), so the real control plane is never skipped silently.
const RequireEnv = "KERF_REQUIRE_CONTROLPLANE"

// ControlPlane is a running etcd + kube-apiserver with clients for it.
type ControlPlane struct {
	// Config reaches the apiserver as a cluster administrator.
	Config *rest.Config
	// Client is a controller-runtime client with Kerf's scheme.
	Client client.Client
	// Clientset is a typed client-go clientset.
	Clientset kubernetes.Interface
	// Kubeconfig is the path of a kubeconfig file for the same administrator.
	Kubeconfig string
	// WebhookClientCA is the path of the PEM CA that signed the client
	// certificate (common name WebhookClientName) the apiserver presents
	// to every admission webhook: what a webhook that authenticates its
	// callers trusts.
	WebhookClientCA string

	env      *envtest.Environment
	dir      string
	stopOnce sync.Once
	stopErr  error
}

// Options configure Start.
type Options struct {
	// BinDir is the bin/ directory that holds k8s-<version>/ and
	// etcd-<version>/. Empty means the bin/ of the repository this package
	// sits in, or $KERF_BIN_DIR.
	BinDir string
	// CRDDirs are directories of CRD manifests to install. Empty means the
	// repository's manifests/crd when it exists.
	CRDDirs []string
	// Output, when set, receives the logs of etcd and kube-apiserver.
	Output *os.File
}

// Start starts etcd and kube-apiserver, installs Kerf's CRDs when they exist
// and returns the running control plane. Stop it with Stop.
func Start(opts Options) (*ControlPlane, error) {
	root, err := kube.RepoRoot()
	if err != nil {
		return nil, err
	}
	binDir := opts.BinDir
	if binDir == "" {
		binDir = os.Getenv("KERF_BIN_DIR")
	}
	if binDir == "" {
		binDir = filepath.Join(root, "bin")
	}
	etcdPath, apiserverPath, err := kube.Binaries(binDir)
	if err != nil {
		return nil, err
	}
	crdDirs := opts.CRDDirs
	if crdDirs == nil {
		if st, err := os.Stat(filepath.Join(root, "manifests", "crd")); err == nil && st.IsDir() {
			crdDirs = []string{filepath.Join(root, "manifests", "crd")}
		}
	}

	dir, err := kube.MakeDir()
	if err != nil {
		return nil, err
	}
	env := &envtest.Environment{
		CRDDirectoryPaths:        crdDirs,
		ErrorIfCRDPathMissing:    len(opts.CRDDirs) > 0,
		ControlPlaneStartTimeout: 60 * time.Second,
		ControlPlaneStopTimeout:  30 * time.Second,
		Scheme:                   kube.Scheme,
	}
	env.ControlPlane.Etcd = &envtest.Etcd{}
	env.ControlPlane.Etcd.Path = etcdPath
	env.ControlPlane.Etcd.DataDir = filepath.Join(dir, "etcd")
	api := env.ControlPlane.GetAPIServer()
	api.Path = apiserverPath
	api.CertDir = filepath.Join(dir, "pki")
	if opts.Output != nil {
		api.Out, api.Err = opts.Output, opts.Output
		env.ControlPlane.Etcd.Out, env.ControlPlane.Etcd.Err = opts.Output, opts.Output
	}
	for _, d := range []string{env.ControlPlane.Etcd.DataDir, api.CertDir} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			_ = os.RemoveAll(dir)
			return nil, fmt.Errorf("create %s: %w", d, err)
		}
	}
	// The apiserver authenticates to webhooks with a client certificate.
	admissionConfig, webhookCA, err := webhookClient(filepath.Join(dir, "admission"))
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	api.Configure().Set("admission-control-config-file", admissionConfig)

	cfg, err := env.Start()
	if err != nil {
		_ = env.Stop()
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("start etcd and kube-apiserver: %w", err)
	}
	cp := &ControlPlane{Config: cfg, WebhookClientCA: webhookCA, env: env, dir: dir}
	if err := cp.connect(); err != nil {
		_ = cp.Stop()
		return nil, err
	}
	return cp, nil
}

func (cp *ControlPlane) connect() error {
	var err error
	if cp.Client, err = client.New(cp.Config, client.Options{Scheme: kube.Scheme}); err != nil {
		return fmt.Errorf("controller-runtime client: %w", err)
	}
	if cp.Clientset, err = kubernetes.NewForConfig(cp.Config); err != nil {
		return fmt.Errorf("clientset: %w", err)
	}
	cp.Kubeconfig = filepath.Join(cp.dir, "kubeconfig")
	if err := os.WriteFile(cp.Kubeconfig, cp.env.KubeConfig, 0o600); err != nil {
		return fmt.Errorf("write kubeconfig: %w", err)
	}
	return nil
}

// Dir is the temporary directory that holds the control plane's data,
// certificates and kubeconfig; Stop removes it.
func (cp *ControlPlane) Dir() string { return cp.dir }

// Stop stops kube-apiserver and etcd and removes their directory. Calling
// it again returns the first call's result.
func (cp *ControlPlane) Stop() error {
	cp.stopOnce.Do(func() {
		cp.stopErr = cp.env.Stop()
		if err := os.RemoveAll(cp.dir); err != nil && cp.stopErr == nil {
			cp.stopErr = err
		}
	})
	return cp.stopErr
}

// Required reports whether a missing control plane must fail the test rather
// than skip it: under `make test` and in CI.
func Required() bool {
	return os.Getenv(RequireEnv) != "" || os.Getenv("CI") == "true"
}

// StartForTest starts a control plane for t and stops it when t ends. Where
// the binaries are missing the test is skipped with the reason, or fails
// when Required says a skip is not allowed.
func StartForTest(t testing.TB, opts ...func(*Options)) *ControlPlane {
	t.Helper()
	var o Options
	for _, f := range opts {
		f(&o)
	}
	cp, err := Start(o)
	if err != nil {
		skipOrFail(t, err)
	}
	t.Cleanup(func() {
		if err := cp.Stop(); err != nil {
			t.Errorf("stop control plane: %v", err)
		}
	})
	return cp
}
