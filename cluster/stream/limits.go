package stream

import (
	"container/list"
	"context"
	"encoding/base64"
	"encoding/json"
	"net"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"k8s.io/apimachinery/pkg/types"
)

// maxSources bounds the failure budgets remembered. At the bound the one
// that failed longest ago is forgotten (least recently used): its next
// failure starts it with a full burst again.
const maxSources = 10000

// failingSources are the budgets of failed authentications, keyed by
// Server.budgetOf: the agent pod a token claims, or the source IP
// (docs/security.md, "Unauthenticated load"). Only a failure charges a
// budget: a TokenReview that refused the token, or a token the review
// passed that is not an agent's. Tokens that pass are never slowed,
// however many agents share an address (a NAT, a node-local proxy); a
// budget spent on failures has its cache misses refused until it
// refills. A budget that never failed holds no entry.
type failingSources struct {
	mu    sync.Mutex
	ips   map[string]*list.Element
	order list.List // of *failingSource, most recent failure first
}

type failingSource struct {
	ip  string
	lim *rate.Limiter
}

// penalized reports whether the budget ip spent itself: less than one
// failure is left now. A budget that is not remembered is not.
func (f *failingSources) penalized(ip string, now time.Time) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	e, ok := f.ips[ip]
	return ok && e.Value.(*failingSource).lim.TokensAt(now) < 1
}

// fail charges ip one failure (perSecond with burst refill its budget).
// The budget may go below zero: failures of reviews that were already in
// flight when it ran out are owed, and the source stays penalized until
// they are repaid.
func (f *failingSources) fail(ip string, now time.Time, perSecond float64, burst int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ips == nil {
		f.ips = map[string]*list.Element{}
	}
	e, ok := f.ips[ip]
	if ok {
		f.order.MoveToFront(e)
	} else {
		if f.order.Len() >= maxSources {
			oldest := f.order.Back()
			f.order.Remove(oldest)
			delete(f.ips, oldest.Value.(*failingSource).ip)
		}
		e = f.order.PushFront(&failingSource{ip: ip, lim: rate.NewLimiter(rate.Limit(perSecond), burst)})
		f.ips[ip] = e
	}
	e.Value.(*failingSource).lim.ReserveN(now, 1)
}

// len is how many sources are remembered.
func (f *failingSources) len() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.order.Len()
}

// maxClaimBytes bounds the part of a token claimedAgentPod decodes.
const maxClaimBytes = 8 << 10

// claims are the unverified claims of a bound service-account token that
// claimedAgentPod reads.
type claims struct {
	Subject      string `json:"sub"`
	KubernetesIO struct {
		Namespace string `json:"namespace"`
		Pod       struct {
			Name string `json:"name"`
			UID  string `json:"uid"`
		} `json:"pod"`
	} `json:"kubernetes.io"`
}

// claimedAgentPod returns the agent pod a token says it is bound to, when
// that pod is in the leader's cache. The token is a JWT whose unverified
// claims name the agents' service account and one of its pods, by name
// and UID. Nothing is verified here; the TokenReview does that. The claim
// only chooses which failure budget a review is charged to.
func (s *Server) claimedAgentPod(token string) (types.UID, bool) {
	_, rest, ok := strings.Cut(token, ".")
	if !ok {
		return "", false
	}
	payload, _, ok := strings.Cut(rest, ".")
	if !ok || len(payload) > maxClaimBytes {
		return "", false
	}
	raw, err := base64.RawURLEncoding.DecodeString(payload)
	if err != nil {
		return "", false
	}
	var c claims
	if json.Unmarshal(raw, &c) != nil {
		return "", false
	}
	ns := s.cfg.ServiceAccountNamespace
	pod := c.KubernetesIO.Pod
	if c.Subject != "system:serviceaccount:"+ns+":"+s.cfg.ServiceAccountName || c.KubernetesIO.Namespace != ns || pod.UID == "" {
		return "", false
	}
	p, ok := s.cfg.Pods.PodByUID(types.UID(pod.UID))
	if !ok || p.Namespace != ns || p.Name != pod.Name || p.Spec.ServiceAccountName != s.cfg.ServiceAccountName {
		return "", false
	}
	return p.UID, true
}

// budgetOf is whose failure budget a token's reviews are charged to. It
// is the agent pod the token claims, when the cache holds that pod
// (claimedAgentPod), else its source IP.
//   - A flood of tokens that claim no known agent pod spends its source's
//     budget, not that of the agents of the same address (a NAT, a
//     node-local proxy).
//   - Tokens forged to claim a known agent pod spend that pod's budget
//     only.
func (s *Server) budgetOf(ctx context.Context, token string) string {
	if uid, ok := s.claimedAgentPod(token); ok {
		return "pod/" + string(uid)
	}
	return "ip/" + sourceIP(ctx)
}

// sourceIP is the IP the stream comes from ("" when unknown).
func sourceIP(ctx context.Context) string {
	p, ok := peer.FromContext(ctx)
	if !ok || p.Addr == nil {
		return ""
	}
	host, _, err := net.SplitHostPort(p.Addr.String())
	if err != nil {
		return p.Addr.String()
	}
	return host
}

// liveStream is a node's current stream.
type liveStream struct {
	id     uint64
	cancel context.CancelCauseFunc
}

// claimNode makes the stream the node's current one, within MaxStreams,
// and returns its id for releaseNode. It closes an older stream of the
// node: an agent has one stream, and a reconnect replaces a stream the
// agent gave up on.
func (s *Server) claimNode(node string, cancel context.CancelCauseFunc) (uint64, error) {
	s.nodesMu.Lock()
	defer s.nodesMu.Unlock()
	n := s.node(node)
	if n.stream == nil && s.streams >= s.cfg.MaxStreams {
		return 0, s.refuse(codes.ResourceExhausted, "too_many_streams", "more than %d streams open", s.cfg.MaxStreams)
	}
	if n.stream != nil {
		n.stream.cancel(s.refuse(codes.Aborted, "stream_replaced", "a newer stream of node %s replaced this one", node))
		s.streams--
	}
	s.nextStream++
	n.stream, n.released = &liveStream{id: s.nextStream, cancel: cancel}, time.Time{}
	s.streams++
	s.metrics.streams.Set(float64(s.streams))
	return n.stream.id, nil
}

// releaseNode ends a stream's claim. When it is still the node's current
// stream, the node's container instances are marked gone; a stream that
// comes back lists them again in its snapshot.
func (s *Server) releaseNode(node string, id uint64) {
	s.nodesMu.Lock()
	n := s.nodes[node]
	if n == nil || n.stream == nil || n.stream.id != id {
		s.nodesMu.Unlock()
		return
	}
	n.stream = nil
	s.streams--
	s.metrics.streams.Set(float64(s.streams))
	now := s.cfg.Now()
	n.released = now
	s.sweepNodes(now)
	gone := make([]instanceKey, 0, len(n.containers))
	for k := range n.containers {
		gone = append(gone, k)
	}
	n.containers = map[instanceKey]struct{}{} // a cleared map keeps its size
	s.nodesMu.Unlock()
	s.markGone(gone)
}
