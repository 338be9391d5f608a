package sandbox

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// certLifetime is how long the sandbox's certificates last: a sandbox is
// torn down long before, and a short lifetime would only add a failure mode.
const certLifetime = 5 * 365 * 24 * time.Hour

// identity is one client or serving certificate the sandbox issues.
type identity struct {
	file   string // base name under pki/: <file>.crt, <file>.key
	cn     string
	orgs   []string
	server bool
	dns    []string
	ips    []net.IP
}

// identities lists every certificate the cluster needs, named by who uses
// it. The user names are the ones Kubernetes' default RBAC bindings expect
// (system:kube-controller-manager, system:kube-scheduler, system:kube-proxy,
// system:node:<name> in system:nodes for the Node authorizer).
func identities(node string) []identity {
	return []identity{
		{file: "apiserver", cn: "kube-apiserver", server: true,
			dns: []string{"kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local", "localhost"},
			ips: []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP(NodeIP), net.ParseIP(APIServiceIP)}},
		{file: "apiserver-kubelet-client", cn: "kube-apiserver-kubelet-client", orgs: []string{"system:masters"}},
		// What the apiserver presents to admission webhooks (its admission
		// kubeconfig); kerf-leader's webhook accepts this name only.
		{file: "apiserver-webhook-client", cn: "kube-apiserver-webhook-client"},
		{file: "admin", cn: "kerf-sandbox-admin", orgs: []string{"system:masters"}},
		{file: "kubelet-client", cn: "system:node:" + node, orgs: []string{"system:nodes"}},
		{file: "kubelet-serving", cn: node, server: true, dns: []string{node, "localhost"},
			ips: []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP(NodeIP)}},
		{file: "kube-controller-manager", cn: "system:kube-controller-manager"},
		{file: "kube-scheduler", cn: "system:kube-scheduler"},
		{file: "kube-proxy", cn: "system:kube-proxy"},
	}
}

// writePKI generates the cluster's CA, every certificate in identities and
// the service-account signing key under dir.
func writePKI(dir, node string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create %s: %w", dir, err)
	}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("generate CA key: %w", err)
	}
	now := time.Now().Add(-time.Hour) // tolerate a little clock skew
	caTmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "kerf-sandbox-ca"},
		NotBefore:             now,
		NotAfter:              now.Add(certLifetime),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, caKey.Public(), caKey)
	if err != nil {
		return fmt.Errorf("sign CA certificate: %w", err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return err
	}
	if err := writePair(dir, "ca", caDER, caKey); err != nil {
		return err
	}
	if err := issue(dir, identities(node), ca, caKey, now); err != nil {
		return err
	}

	// The service-account key pair: the apiserver signs tokens with the
	// private key and checks them with the public one; the controller
	// manager signs the legacy token secrets with the private key.
	saKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("generate service-account key: %w", err)
	}
	if err := writeKey(filepath.Join(dir, "sa.key"), saKey); err != nil {
		return err
	}
	pub, err := x509.MarshalPKIXPublicKey(saKey.Public())
	if err != nil {
		return err
	}
	return writePEM(filepath.Join(dir, "sa.pub"), "PUBLIC KEY", pub, 0o644)
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	return n
}

func writePair(dir, name string, der []byte, key crypto.Signer) error {
	if err := writePEM(filepath.Join(dir, name+".crt"), "CERTIFICATE", der, 0o644); err != nil {
		return err
	}
	return writeKey(filepath.Join(dir, name+".key"), key)
}

func writeKey(path string, key crypto.Signer) error {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return fmt.Errorf("encode %s: %w", path, err)
	}
	return writePEM(path, "PRIVATE KEY", der, 0o600)
}

func writePEM(path, typ string, der []byte, mode os.FileMode) error {
	data := pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
	if err := os.WriteFile(path, data, mode); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// issue writes a key and a certificate signed by ca for each of ids into
// dir, valid from now for certLifetime.
func issue(dir string, ids []identity, ca *x509.Certificate, caKey crypto.Signer, now time.Time) error {
	for _, id := range ids {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return fmt.Errorf("generate key for %s: %w", id.file, err)
		}
		tmpl := &x509.Certificate{
			SerialNumber: serial(),
			Subject:      pkix.Name{CommonName: id.cn, Organization: id.orgs},
			NotBefore:    now,
			NotAfter:     now.Add(certLifetime),
			KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
			ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
			DNSNames:     id.dns,
			IPAddresses:  id.ips,
		}
		if id.server {
			tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, key.Public(), caKey)
		if err != nil {
			return fmt.Errorf("sign certificate %s: %w", id.file, err)
		}
		if err := writePair(dir, id.file, der, key); err != nil {
			return err
		}
	}
	return nil
}
