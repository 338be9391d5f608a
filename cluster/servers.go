package cluster

import (
	"context"
	"crypto"
	"crypto/tls"
	"errors"
	"fmt"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kerf-dev/kerf/cluster/cert"
	"github.com/kerf-dev/kerf/cluster/forward"
	"github.com/kerf-dev/kerf/internal/kube"
)

// serverTLS resolves the certificate source of one of the replica's
// servers (the webhook, the stream, the endpoints), the same way for all:
// the user's files, or a self-managed certificate shared by every replica
// through a Secret, which it also returns.
func (l *Leader) serverTLS(ctx context.Context, server string, src cert.Source) (*tls.Config, *cert.SelfManaged, error) {
	// One certificate source serves every server that names it (the
	// stream's serves the endpoints too): one Secret, one renewal loop.
	key := src.Dir + "\x00" + src.SelfManaged.Namespace + "/" + src.SelfManaged.SecretName
	if r, ok := l.serverTLSBySource[key]; ok {
		return r.config, r.selfManaged, nil
	}
	var c client.Client
	if src.Dir == "" {
		// The manager's client reads from a cache that is not started yet.
		var err error
		if c, err = client.New(l.restConfig, client.Options{Scheme: kube.Scheme}); err != nil {
			return nil, nil, fmt.Errorf("%s certificate client: %w", server, err)
		}
	}
	tlsConfig, sm, err := src.Resolve(ctx, c, l.log.With("server", server))
	if err != nil {
		return nil, nil, fmt.Errorf("%s certificate: %w", server, err)
	}
	if l.serverTLSBySource == nil {
		l.serverTLSBySource = make(map[string]resolvedCert)
	}
	l.serverTLSBySource[key] = resolvedCert{tlsConfig, sm}
	return tlsConfig, sm, nil
}

// resolvedCert is a certificate source Run resolved: its servers' TLS
// configuration, and its SelfManaged certificate (nil for the user's
// files).
type resolvedCert struct {
	config      *tls.Config
	selfManaged *cert.SelfManaged
}

// AgentMetricsCertificateValidity is how long an agent's /metrics
// certificate is valid. Every stream brings a new one (at least every
// stream.DefaultMaxStreamAge), so a day covers a leader away for most of
// one, and a key taken from a node serves an impostor for a day at most.
const AgentMetricsCertificateValidity = 24 * time.Hour

// issueAgentMetricsCertificate signs an agent's /metrics certificate with
// the stream's CA, for the name scrapers check
// (kerf-agent.<namespace>.svc), naming the node the agent's token proved.
func (l *Leader) issueAgentMetricsCertificate(pub crypto.PublicKey, node string) ([]byte, error) {
	sm := l.streamIssuer.Load()
	if sm == nil {
		return nil, errors.New("the stream's certificate is not self-managed (--stream-cert-dir): Kerf holds no CA key to sign the agents' with")
	}
	name := l.cfg.Stream.ServiceAccountName + "." + l.cfg.Stream.ServiceAccountNamespace + ".svc"
	return sm.Issue(pub, l.cfg.Stream.ServiceAccountName+":"+node, []string{name}, AgentMetricsCertificateValidity)
}

// addForwarder adds the hub forwarder, a Runnable only the elected leader
// runs, with the replica's namespace, identity, metrics, clock and log.
func (l *Leader) addForwarder(hc forward.Config) error {
	if hc.Namespace == "" {
		hc.Namespace = l.cfg.Namespace
	}
	if hc.Identity == "" {
		hc.Identity = l.cfg.Identity
	}
	if hc.Registerer == nil {
		hc.Registerer = l.registry
	}
	if hc.AgentsConnected == nil && l.stream != nil {
		hc.AgentsConnected = forward.GaugeReader(l.registry, "kerf_stream_connected_agents")
	}
	if hc.Now == nil {
		hc.Now = l.cfg.Now
	}
	if hc.Log == nil {
		hc.Log = l.log
	}
	if hc.Recommendations == nil {
		hc.Recommendations = l.recommendations
	}
	fw, err := forward.New(hc, l.writer, l.mgr.GetAPIReader())
	if err != nil {
		return fmt.Errorf("hub forwarder: %w", err)
	}
	if err := l.mgr.Add(fw); err != nil {
		return fmt.Errorf("add the hub forwarder: %w", err)
	}
	return nil
}
