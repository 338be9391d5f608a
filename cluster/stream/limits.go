package stream

import (
	"container/list"
	"context"
	"net"
	"sync"
	"time"

	"golang.org/x/time/rate"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
)

// maxSources bounds the sources whose failures are remembered. At the
// bound the source that failed longest ago is forgotten (least recently
// used): its next failure starts it with a full burst again.
const maxSources = 10000

// failingSources are the per-source-IP budgets of failed authentications
// (docs/security.md, "Unauthenticated load"). Only a failure charges a
// source: a TokenReview that refused the token, or a token the review
// passed that is not an agent's. A source whose tokens pass is never
// slowed, however many agents share its address (a NAT, a node-local
// proxy); one that spent its budget on failures has its cache misses
// refused until the budget refills. A source that never failed holds no
// entry.
type failingSources struct {
	mu    sync.Mutex
	ips   map[string]*list.Element
	order list.List // of *failingSource, most recent failure first
}

type failingSource struct {
	ip  string
	lim *rate.Limiter
}

// penalized reports whether ip spent its failure budget: less than one
// failure is left now. A source that is not remembered is not.
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

// claimNode makes the stream the node's current one, closing an older
// stream of the node (an agent has one stream; a reconnect replaces a
// stream the agent gave up on), within MaxStreams. It returns the stream's
// id for releaseNode.
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
	n.stream = &liveStream{id: s.nextStream, cancel: cancel}
	s.streams++
	s.metrics.streams.Set(float64(s.streams))
	return n.stream.id, nil
}

// releaseNode ends a stream's claim: when it is still the node's current
// stream, the node's container instances are marked gone (a stream that
// comes back lists them again in its snapshot).
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
	gone := make([]instanceKey, 0, len(n.containers))
	for k := range n.containers {
		gone = append(gone, k)
	}
	n.containers = map[instanceKey]struct{}{} // a cleared map keeps its size
	s.nodesMu.Unlock()
	s.markGone(gone)
}
