package cluster

import (
	"cmp"
	"context"
	"crypto"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kerf-dev/kerf/cluster/audit"
	"github.com/kerf-dev/kerf/cluster/cert"
	"github.com/kerf-dev/kerf/cluster/forward"
	"github.com/kerf-dev/kerf/cluster/pages"
	"github.com/kerf-dev/kerf/cluster/stream"
	"github.com/kerf-dev/kerf/cluster/webhook"
	"github.com/kerf-dev/kerf/internal/endpoints"
	"github.com/kerf-dev/kerf/internal/kube"
	webui "github.com/kerf-dev/kerf/web"
)

// serverTLS resolves the certificate source of one of the replica's
// servers: the webhook, the stream or the endpoints. All resolve the same
// way: the user's files, or a self-managed certificate shared by every
// replica through a Secret. It returns the self-managed one too.
func (l *Leader) serverTLS(ctx context.Context, server string, src cert.Source) (*tls.Config, *cert.SelfManaged, error) {
	// One certificate source serves every server that names it; the
	// stream's serves the endpoints too. One Secret, one renewal loop.
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
// configuration, and its SelfManaged certificate, nil for the user's
// files.
type resolvedCert struct {
	config      *tls.Config
	selfManaged *cert.SelfManaged
}

// AgentMetricsCertificateValidity is how long an agent's /metrics
// certificate is valid. Every stream brings a new one, at least every
// stream.DefaultMaxStreamAge. So a day covers a leader away for most of
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
	hc.Namespace = cmp.Or(hc.Namespace, l.cfg.Namespace)
	hc.Identity = cmp.Or(hc.Identity, l.cfg.Identity)
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

// serveEndpoints serves /metrics, the probes, the audit API and the web
// pages on Config.Listener until ctx is done; without a listener it
// serves nothing. Every route but the probes asks the caller's token
// (docs/security.md): /metrics a get on the URL, the audit API and the
// pages the namespaces it may list recommendations in.
func (l *Leader) serveEndpoints(ctx context.Context) error {
	if l.cfg.Listener == nil {
		return nil
	}
	opts := []endpoints.Option{endpoints.MetricsAuthorizedBy(l.authn)}
	if l.cfg.ListenerCert != nil {
		tlsConfig, _, err := l.serverTLS(ctx, "endpoints", *l.cfg.ListenerCert)
		if err != nil {
			return err
		}
		opts = append(opts, endpoints.ServeTLS(tlsConfig))
	}
	srv := endpoints.New(prometheus.Gatherers{l.registry}, l.synced.Load, opts...)
	auditAPI := audit.New(l.mgr.GetCache())
	auditAPI.Authorizer = l.authn
	api := http.NewServeMux()
	auditAPI.Register(api)
	srv.Mux().Handle("/v1/", l.authn.Authenticated(api, audit.WriteRefusal))
	activity := &webui.Activity{Source: auditAPI, Refresh: 30 * time.Second}
	srv.Mux().Handle("GET /ui/activity", l.authn.Authenticated(auditAPI.AuthorizeNamespace(activity,
		func(r *http.Request) string { return r.URL.Query().Get("namespace") }), nil))
	workloads := &webui.WorkloadPage{
		Source:  &pages.WorkloadViews{Reader: l.mgr.GetCache(), Live: l.mgr.GetAPIReader(), Series: l.usage, Now: l.cfg.Now},
		Refresh: 30 * time.Second, ActivityHref: "../../activity", Log: l.log,
	}
	srv.Mux().Handle("GET /ui/workloads/{namespace}/{name}", l.authn.Authenticated(auditAPI.AuthorizeNamespace(workloads,
		func(r *http.Request) string { return r.PathValue("namespace") }), nil))
	savingsPage := &webui.Savings{Source: &pages.Savings{Reader: l.mgr.GetCache()}, Refresh: time.Minute, Now: l.cfg.Now, Log: l.log}
	srv.Mux().Handle("GET /ui/savings", l.authn.Authenticated(auditAPI.AuthorizeNamespace(savingsPage,
		func(r *http.Request) string { return r.URL.Query().Get("namespace") }), nil))
	go func() {
		if err := srv.ServeListener(ctx, l.cfg.Listener); err != nil {
			l.log.Error("endpoints stopped", "err", err)
		}
	}()
	return nil
}

// serveWebhook serves the admission webhook on Config.Webhook.Listener
// until ctx is done, on every replica; without a listener it serves
// nothing.
func (l *Leader) serveWebhook(ctx context.Context) error {
	if l.cfg.Webhook.Listener == nil {
		return nil
	}
	tlsConfig, _, err := l.serverTLS(ctx, "webhook", l.cfg.Webhook.Cert)
	if err != nil {
		return err
	}
	if tlsConfig, err = l.cfg.Webhook.ClientAuth.ServerTLS(tlsConfig, l.log.With("server", "webhook")); err != nil {
		return fmt.Errorf("webhook: %w", err)
	}
	in := webhook.NewInjector(l.mgr.GetCache(), l.registry, l.log)
	in.Synced = l.synced.Load
	in.LiveReader = l.mgr.GetAPIReader()
	go func() {
		if err := webhook.ServeListener(ctx, l.cfg.Webhook.Listener, tlsConfig, webhook.Mux(in)); err != nil {
			l.log.Error("webhook stopped", "err", err)
		}
	}()
	return nil
}

// serveStream serves the agents' stream on Config.Stream.Listener and
// returns what stops it, a no-op without a stream. Only the leader
// acknowledges what the stream receives (Leading).
func (l *Leader) serveStream(ctx context.Context) (stop func(), err error) {
	if l.stream == nil {
		return func() {}, nil
	}
	tlsConfig, sm, err := l.serverTLS(ctx, "stream", l.cfg.Stream.Cert)
	if err != nil {
		return nil, err
	}
	if sm != nil {
		l.streamIssuer.Store(sm)
	}
	gs := stream.NewGRPCServer(l.stream, tlsConfig)
	go func() {
		if err := gs.Serve(l.cfg.Stream.Listener); err != nil {
			l.log.Error("stream stopped", "err", err)
		}
	}()
	return gs.Stop, nil
}
