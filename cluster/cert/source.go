package cert

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"
)

// refreshInterval is how often a self-managed certificate is re-ensured
// and its CA bundle re-published.
const refreshInterval = time.Hour

// Source says where one server's certificate comes from: the user's files
// in Dir, or else a self-managed certificate as SelfManaged describes it.
// The webhook and the stream each have one, resolved the same way (TLS).
type Source struct {
	// Dir holds tls.crt and tls.key supplied by the user, reloaded when
	// they change. Empty means a self-managed certificate.
	Dir string
	// SelfManaged says where the self-managed certificate lives, whom it
	// serves and where its CA bundle is published; unused when Dir is set.
	SelfManaged Options
}

// Validate reports a Source that cannot give a certificate: no Dir and no
// self-managed Secret to keep one in.
func (s Source) Validate() error {
	if s.Dir != "" {
		return nil
	}
	_, err := s.SelfManaged.withDefaults()
	return err
}

// TLS resolves the source into a server TLS configuration. It serves the
// files of Dir (NewFile), or a self-managed certificate (NewSelfManaged)
// that is refreshed every hour until ctx ends. c should read Secrets from
// the apiserver, not from a cache (see EnsureSelfManaged).
func (s Source) TLS(ctx context.Context, c client.Client, log *slog.Logger) (*tls.Config, error) {
	cfg, _, err := s.Resolve(ctx, c, log)
	return cfg, err
}

// Resolve is TLS, and also returns the SelfManaged certificate, which can
// issue certificates of its CA. It is nil for a Dir: Kerf holds no CA key
// then.
func (s Source) Resolve(ctx context.Context, c client.Client, log *slog.Logger) (*tls.Config, *SelfManaged, error) {
	if s.Dir != "" {
		f, err := NewFile(s.Dir, log)
		if err != nil {
			return nil, nil, fmt.Errorf("certificate in %s: %w", s.Dir, err)
		}
		return TLSConfig(f.GetCertificate), nil, nil
	}
	if c == nil {
		return nil, nil, errors.New("self-managed certificate: no client")
	}
	sm, err := NewSelfManaged(ctx, c, s.SelfManaged, log)
	if err != nil {
		return nil, nil, fmt.Errorf("self-managed certificate in Secret %s/%s: %w", s.SelfManaged.Namespace, s.SelfManaged.SecretName, err)
	}
	go sm.Run(ctx, refreshInterval)
	return TLSConfig(sm.GetCertificate), sm, nil
}

// TLSConfig returns a server TLS configuration (TLS 1.2 or newer) taking
// its certificate from getCertificate, such as SelfManaged.GetCertificate
// or File.GetCertificate.
func TLSConfig(getCertificate func(*tls.ClientHelloInfo) (*tls.Certificate, error)) *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: getCertificate}
}
