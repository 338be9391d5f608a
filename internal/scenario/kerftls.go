package scenario

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The names Kerf's certificates cover: the leader's Service's
// (manifests/leader.yaml), and the one the leader signs every agent's
// /metrics certificate for. The endpoints are reached by pod IP and
// checked against these names, as the PodMonitors do.
const (
	LeaderServerName = "kerf-leader." + KerfNamespace + ".svc"
	AgentServerName  = "kerf-agent." + KerfNamespace + ".svc"
)

// leaderCAConfigMap is where the leader publishes the CA of its
// self-managed certificate (key ca.crt).
const leaderCAConfigMap = "kerf-leader-ca"

// KerfTransport returns the transport of Kerf's endpoints: HTTPS ones
// are verified against the CA the leader publishes in ConfigMap
// kerf-leader-ca, read again for each request (a CA rotation), and
// AgentServerName on the agents' port, LeaderServerName on the others;
// plain HTTP goes through http.DefaultTransport.
func (e *Env) KerfTransport() http.RoundTripper {
	return roundTripper(func(req *http.Request) (*http.Response, error) {
		if req.URL.Scheme != "https" {
			return http.DefaultTransport.RoundTrip(req)
		}
		name := LeaderServerName
		if req.URL.Port() == strconv.Itoa(AgentMetricsPort) {
			name = AgentServerName
		}
		tr, err := e.leaderTransport(req.Context(), name)
		if err != nil {
			return nil, err
		}
		return tr.RoundTrip(req)
	})
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// kerfClient is the scenarios' client of Kerf's endpoints: KerfTransport
// with the pod network client's timeout.
func (e *Env) kerfClient() *http.Client {
	return &http.Client{Timeout: e.httpClient().Timeout, Transport: e.KerfTransport()}
}

// leaderTransport returns a transport that trusts the CA bundle now in
// ConfigMap kerf-leader-ca for serverName, kept while the bundle is the
// same.
func (e *Env) leaderTransport(ctx context.Context, serverName string) (*http.Transport, error) {
	var cm corev1.ConfigMap
	if err := e.Client.Get(ctx, client.ObjectKey{Namespace: KerfNamespace, Name: leaderCAConfigMap}, &cm); err != nil {
		return nil, fmt.Errorf("the leader's CA (ConfigMap %s/%s): %w", KerfNamespace, leaderCAConfigMap, err)
	}
	ca := []byte(cm.Data["ca.crt"])
	e.tlsMu.Lock()
	defer e.tlsMu.Unlock()
	if tr := e.kerfTLS[serverName]; tr != nil && bytes.Equal(e.kerfCA, ca) {
		return tr, nil
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return nil, fmt.Errorf("the leader's CA (ConfigMap %s/%s): no certificate in ca.crt", KerfNamespace, leaderCAConfigMap)
	}
	if !bytes.Equal(e.kerfCA, ca) {
		for _, old := range e.kerfTLS {
			old.CloseIdleConnections()
		}
		e.kerfTLS, e.kerfCA = map[string]*http.Transport{}, ca
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = &tls.Config{RootCAs: pool, ServerName: serverName, MinVersion: tls.VersionTLS12}
	e.kerfTLS[serverName] = tr
	return tr, nil
}
