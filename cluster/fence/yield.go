package fence

import (
	"context"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// RollbackGate makes the applies' writes yield to rollbacks
// (docs/leader.md, "Workers and the rollbacks' priority").
//
// A pass holds the gate from the moment it decides or resumes a rollback
// until it ends. Meanwhile every mutating request of the leader's other
// fenced clients waits before it is sent, up to the gate's max: the
// applies' writes, their status writes and Events. So the rollback's own
// writes meet an apiserver, and a leader, not busy with the applies'
// requests. Reads never wait, nor the rollbacks' own client, which the
// gate does not wrap. A nil gate lets everything through.
type RollbackGate struct {
	max time.Duration
	// waits observes how long each write that found the gate held
	// waited.
	waits prometheus.Observer

	mu sync.Mutex
	// held is how many passes hold the gate; open is closed when none
	// does (nil then), and made anew when the first takes it.
	held int
	open chan struct{}
}

// NewRollbackGate returns an open gate whose writes wait max at most; its
// histogram of the waits is registered with reg.
func NewRollbackGate(max time.Duration, reg prometheus.Registerer) *RollbackGate {
	h := prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "kerf_leader_apply_yield_seconds",
		Help:    "How long a write of the applies waited for the rollbacks in progress before it was sent (at most --apply-yield each).",
		Buckets: []float64{0.01, 0.05, 0.1, 0.25, 0.5, 1},
	})
	reg.MustRegister(h)
	return &RollbackGate{max: max, waits: h}
}

// Hold takes the gate for a rollback pass and returns its release, which
// may be called more than once.
func (g *RollbackGate) Hold() (release func()) {
	if g == nil {
		return func() {}
	}
	g.mu.Lock()
	if g.held == 0 {
		g.open = make(chan struct{})
	}
	g.held++
	g.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			g.mu.Lock()
			defer g.mu.Unlock()
			if g.held--; g.held == 0 {
				close(g.open)
				g.open = nil
			}
		})
	}
}

// wait waits until no rollback holds the gate, g.max at most, or ctx is
// done.
func (g *RollbackGate) wait(ctx context.Context) {
	if g == nil {
		return
	}
	g.mu.Lock()
	open := g.open
	g.mu.Unlock()
	if open == nil {
		return
	}
	start := time.Now()
	t := time.NewTimer(g.max)
	defer t.Stop()
	select {
	case <-open:
	case <-t.C:
	case <-ctx.Done():
	}
	g.waits.Observe(time.Since(start).Seconds())
}

// Wrap makes every mutating request of a transport wait for the gate.
func (g *RollbackGate) Wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
		switch req.Method {
		case http.MethodGet, http.MethodHead, http.MethodOptions:
		default:
			g.wait(req.Context())
		}
		return rt.RoundTrip(req)
	})
}

// DefaultApplyYield is the longest one write of the applies waits for
// the rollbacks in progress: RollbackGate's max, the leader's
// --apply-yield. It outlasts a rollback pass (docs/leader.md, "The
// rollbacks' priority and workers, measured"). And a storm of rollbacks
// must slow the applies, not stop them.
const DefaultApplyYield = time.Second

// NoApplyYield as the leader's apply yield turns the gate off: the applies'
// writes never wait for rollbacks.
const NoApplyYield time.Duration = -1
