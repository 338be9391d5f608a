package stream

import (
	"context"
	"net"
	"sync"
	"time"

	"golang.org/x/time/rate"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
)

// maxSources bounds the per-source limiters kept; past it the idle ones
// go, then all (a limiter forgotten starts with its full burst).
const maxSources = 10000

// sourceIdle is how long a source's limiter is kept without a review.
const sourceIdle = time.Minute

// sourceLimiters are the TokenReview rate limiters per source IP.
type sourceLimiters struct {
	mu  sync.Mutex
	ips map[string]*sourceLimiter
}

type sourceLimiter struct {
	lim  *rate.Limiter
	last time.Time
}

// allow reports whether the source may cause one more TokenReview now.
func (l *sourceLimiters) allow(ip string, now time.Time, perSecond float64, burst int) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ips == nil {
		l.ips = map[string]*sourceLimiter{}
	}
	e := l.ips[ip]
	if e == nil {
		if len(l.ips) >= maxSources {
			for k, v := range l.ips {
				if now.Sub(v.last) > sourceIdle {
					delete(l.ips, k)
				}
			}
			if len(l.ips) >= maxSources {
				clear(l.ips)
			}
		}
		e = &sourceLimiter{lim: rate.NewLimiter(rate.Limit(perSecond), burst)}
		l.ips[ip] = e
	}
	e.last = now
	return e.lim.AllowN(now, 1)
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
