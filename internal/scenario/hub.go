package scenario

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kerf-dev/kerf/internal/selfsigned"
)

// The sandbox's kerf-hub (internal/scenario/manifests/hub).
const (
	// HubNamespace is the hub's namespace.
	HubNamespace = "kerf-hub"
	// HubServiceIP is the hub Service's fixed cluster IP: the sandbox has
	// no cluster DNS, so the leader's pod resolves kerf-hub.kerf-hub.svc
	// to it through /etc/hosts (internal/scenario/manifests/kerf).
	HubServiceIP = "10.96.0.20"
	// HubCluster is the name the sandbox's cluster is registered under on
	// its hub.
	HubCluster = "sandbox"
)

// Hub is the sandbox's running kerf-hub, reachable from this machine.
type Hub struct {
	// URL is its API's base URL (the Service's cluster IP, which the
	// certificate names).
	URL string
	// CAFile is the certificate to trust it by (self-signed: its own CA).
	CAFile string
	// ReadToken is a read token (`kerf-hub tokens add-reader`), for the
	// API's GETs and the pages' sign-in.
	ReadToken string
	// ReadTokenFile holds ReadToken, for curl.
	ReadTokenFile string
}

// installHub runs kerf-hub in the sandbox (SQLite on an emptyDir), with a
// self-signed certificate for its Service's names, registers the cluster,
// and gives the leader its Secret kerf-hub-client, as docs/hub.md's
// bootstrap does with kubectl exec.
func (in *Installed) installHub(ctx context.Context, repoRoot, stateDir string) (*Hub, error) {
	dir := filepath.Join(stateDir, "hub")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	pair, err := selfsigned.New("kerf-hub (sandbox)", []string{"kerf-hub.kerf-hub.svc", "kerf-hub.kerf-hub.svc.cluster.local", HubServiceIP}, 30*24*time.Hour)
	if err != nil {
		return nil, fmt.Errorf("the hub's certificate: %w", err)
	}
	certPEM, keyPEM := pair.CertPEM, pair.KeyPEM
	h := &Hub{URL: "https://" + HubServiceIP + ":9443", CAFile: filepath.Join(dir, "ca.crt"), ReadTokenFile: filepath.Join(dir, "read.token")}
	if err := os.WriteFile(h.CAFile, certPEM, 0o644); err != nil {
		return nil, err
	}
	for _, ns := range []string{HubNamespace, KerfNamespace} {
		if err := in.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil && !apierrors.IsAlreadyExists(err) {
			return nil, fmt.Errorf("namespace %s: %w", ns, err)
		}
	}
	if err := in.putSecret(ctx, HubNamespace, "kerf-hub-tls", corev1.SecretTypeTLS, map[string][]byte{"tls.crt": certPEM, "tls.key": keyPEM}); err != nil {
		return nil, err
	}
	if out, err := in.Run(ctx, "apply", "--server-side", "--force-conflicts", "-k", filepath.Join(repoRoot, "internal", "scenario", "manifests", "hub")); err != nil {
		return nil, fmt.Errorf("%w\n%s", err, out)
	}
	// A reused sandbox may still run a hub with the old certificate.
	if out, err := in.Run(ctx, "-n", HubNamespace, "rollout", "restart", "deployment/kerf-hub"); err != nil {
		return nil, fmt.Errorf("%w\n%s", err, out)
	}
	if out, err := in.Run(ctx, "-n", HubNamespace, "rollout", "status", "deployment/kerf-hub", "--timeout=3m"); err != nil {
		describe, _ := in.Run(ctx, "-n", HubNamespace, "get", "pods,events", "-o", "wide")
		return nil, fmt.Errorf("%w\n%s\n%s", err, out, describe)
	}
	token, err := in.hubAdmin(ctx, "clusters", "add", HubCluster)
	if err != nil && strings.Contains(err.Error(), "already") {
		token, err = in.hubAdmin(ctx, "tokens", "add-cluster", HubCluster)
	}
	if err != nil {
		return nil, err
	}
	if h.ReadToken, err = in.hubAdmin(ctx, "tokens", "add-reader", "demo"); err != nil {
		return nil, err
	}
	if err := os.WriteFile(h.ReadTokenFile, []byte(h.ReadToken), 0o600); err != nil {
		return nil, err
	}
	err = in.putSecret(ctx, KerfNamespace, "kerf-hub-client", corev1.SecretTypeOpaque, map[string][]byte{
		"cluster": []byte(HubCluster), "token": []byte(token), "ca.crt": certPEM})
	return h, err
}

// hubAdmin runs a kerf-hub admin command in the hub's pod (kubectl exec)
// and returns its standard output, trimmed: the token, for the commands
// that make one.
func (in *Installed) hubAdmin(ctx context.Context, args ...string) (string, error) {
	full := append([]string{"--kubeconfig", in.Cluster.Kubeconfig, "-n", HubNamespace, "exec", "deploy/kerf-hub", "--", "kerf-hub"}, args...)
	cmd := exec.CommandContext(ctx, in.Kubectl, full...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("kerf-hub %s (kubectl exec): %w: %s", strings.Join(args, " "), err, strings.TrimSpace(errb.String()+" "+out.String()))
	}
	return strings.TrimSpace(out.String()), nil
}

// putSecret creates or replaces a Secret.
func (in *Installed) putSecret(ctx context.Context, ns, name string, typ corev1.SecretType, data map[string][]byte) error {
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Type: typ, Data: data}
	err := in.Client.Create(ctx, s)
	if apierrors.IsAlreadyExists(err) {
		var old corev1.Secret
		if err = in.Client.Get(ctx, client.ObjectKeyFromObject(s), &old); err == nil {
			old.Data = data
			err = in.Client.Update(ctx, &old)
		}
	}
	if err != nil {
		return fmt.Errorf("secret %s/%s: %w", ns, name, err)
	}
	return nil
}

// Get returns the body of a GET of the hub's API path (such as
// /v1/audit?type=rolled_back) with the read token, when it answers 200.
func (h *Hub) Get(ctx context.Context, path string) (string, error) {
	ca, err := os.ReadFile(h.CAFile)
	if err != nil {
		return "", err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, h.URL+path, nil)
	if err != nil {
		return "", err
	}
	req.Header.Set("Authorization", "Bearer "+h.ReadToken)
	resp, err := c.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET %s: %s: %s", path, resp.Status, strings.TrimSpace(string(body)))
	}
	return string(body), nil
}
