// Package kube is the local Kubernetes that Kerf's sandbox, demo and tests
// run against: the pinned Kubernetes and etcd versions (versions.env, also
// read by hack/controlplane.sh), the paths of the binaries `make deps`
// builds under bin/, the repository root that holds bin/, the scratch
// directories of control planes and the reaping of orphaned ones, and the
// scheme of the Kubernetes and Kerf types. It links no test code, so the
// shipped kerf-sandbox can use it; test/controlplane builds on it.
package kube

import (
	"bufio"
	_ "embed"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

//go:embed versions.env
var versionsEnv string

// Versions of the control plane that `make deps` builds
// (hack/controlplane.sh), read from versions.env.
var (
	// KubernetesVersion is the Kubernetes release, e.g. v1.37.2; its
	// binaries live in bin/k8s-<version>/.
	KubernetesVersion = mustVersion("KUBERNETES_VERSION")
	// EtcdVersion is the etcd release, e.g. v3.6.16; its binary lives in
	// bin/etcd-<version>/.
	EtcdVersion = mustVersion("ETCD_VERSION")
)

// mustVersion returns the value of key in versions.env and panics when it
// is missing: the file is embedded, so that is a build mistake.
func mustVersion(key string) string {
	v, err := lookup(versionsEnv, key)
	if err != nil {
		panic(err)
	}
	return v
}

// lookup returns the value of key in env, KEY=VALUE lines where # starts a
// comment line.
func lookup(env, key string) (string, error) {
	sc := bufio.NewScanner(strings.NewReader(env))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if ok && k == key && v != "" {
			return v, nil
		}
	}
	return "", fmt.Errorf("versions.env: no %s", key)
}

// KubernetesDir returns the directory under binDir that holds the
// Kubernetes binaries of KubernetesVersion.
func KubernetesDir(binDir string) string {
	return filepath.Join(binDir, "k8s-"+KubernetesVersion)
}

// EtcdBinary returns the path of the etcd binary of EtcdVersion under binDir.
func EtcdBinary(binDir string) string {
	return filepath.Join(binDir, "etcd-"+EtcdVersion, "etcd")
}

// Binaries returns the paths of the etcd and kube-apiserver binaries under
// binDir, and an error naming the first one that is missing.
func Binaries(binDir string) (etcd, apiserver string, err error) {
	etcd = EtcdBinary(binDir)
	apiserver = filepath.Join(KubernetesDir(binDir), "kube-apiserver")
	for _, p := range []string{etcd, apiserver} {
		if _, statErr := os.Stat(p); statErr != nil {
			return etcd, apiserver, fmt.Errorf("control plane binary %s: %w (run 'make deps' to build it)", p, statErr)
		}
	}
	return etcd, apiserver, nil
}

// RepoRoot returns the directory of the repository's go.mod, found by walking
// up from the working directory: bin/ and manifests/ are found from it.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("find the repository root: %w", err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("go.mod not found above the working directory")
		}
		dir = parent
	}
}
