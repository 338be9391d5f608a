package controlplane

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"time"
)

// WebhookClientName is the common name of the client certificate the
// apiserver presents to admission webhooks (cluster/webhook's
// DefaultClientName).
const WebhookClientName = "kube-apiserver-webhook-client"

// webhookClient writes, under dir, a CA and a client certificate it signs
// for WebhookClientName, a kubeconfig that gives that certificate for
// every webhook ("*"), and the AdmissionConfiguration that hands the
// kubeconfig to both webhook admission plugins, as an operator configures
// a production apiserver (docs/install.md). It returns the configuration's
// path (--admission-control-config-file) and the CA's.
func webhookClient(dir string) (configPath, caPath string, err error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", "", fmt.Errorf("create %s: %w", dir, err)
	}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", "", err
	}
	now := time.Now().Add(-time.Hour)
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "kerf-test-webhook-client-ca"},
		NotBefore: now, NotAfter: now.Add(10 * 365 * 24 * time.Hour),
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature, BasicConstraintsValid: true, IsCA: true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, caKey.Public(), caKey)
	if err != nil {
		return "", "", fmt.Errorf("sign the webhook client CA: %w", err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return "", "", err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", "", err
	}
	der, err := x509.CreateCertificate(rand.Reader, &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: WebhookClientName},
		NotBefore: now, NotAfter: now.Add(10 * 365 * 24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}, ca, key.Public(), caKey)
	if err != nil {
		return "", "", fmt.Errorf("sign the webhook client certificate: %w", err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return "", "", err
	}
	crtPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})
	caPath = filepath.Join(dir, "webhook-client-ca.crt")
	kubeconfig := filepath.Join(dir, "webhook-client.kubeconfig")
	configPath = filepath.Join(dir, "admission.yaml")
	b64 := base64.StdEncoding.EncodeToString
	files := map[string]string{
		caPath: string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})),
		kubeconfig: `apiVersion: v1
kind: Config
users:
  - name: "*"
    user:
      client-certificate-data: ` + b64(crtPEM) + `
      client-key-data: ` + b64(keyPEM) + `
`,
		configPath: `apiVersion: apiserver.config.k8s.io/v1
kind: AdmissionConfiguration
plugins:
  - name: MutatingAdmissionWebhook
    configuration:
      apiVersion: apiserver.config.k8s.io/v1
      kind: WebhookAdmissionConfiguration
      kubeConfigFile: ` + kubeconfig + `
  - name: ValidatingAdmissionWebhook
    configuration:
      apiVersion: apiserver.config.k8s.io/v1
      kind: WebhookAdmissionConfiguration
      kubeConfigFile: ` + kubeconfig + `
`,
	}
	for path, content := range files {
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			return "", "", fmt.Errorf("write %s: %w", path, err)
		}
	}
	return configPath, caPath, nil
}
