package fence

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
)

// gatedServer is an HTTP server behind a RollbackGate's transport, noting
// the requests it received.
type gatedServer struct {
	client *http.Client
	url    string
	mu     sync.Mutex
	got    []string
}

func newGatedServer(t *testing.T, g *RollbackGate) *gatedServer {
	s := &gatedServer{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.got = append(s.got, r.Method)
		s.mu.Unlock()
	}))
	t.Cleanup(srv.Close)
	s.url = srv.URL
	s.client = &http.Client{Transport: g.Wrap(http.DefaultTransport)}
	return s
}

// send sends a request and closes when it was answered.
func (s *gatedServer) send(t *testing.T, method string) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		req, err := http.NewRequestWithContext(context.Background(), method, s.url, nil)
		if err == nil {
			var resp *http.Response
			if resp, err = s.client.Do(req); err == nil {
				resp.Body.Close()
			}
		}
		if err != nil {
			t.Errorf("%s: %v", method, err)
		}
	}()
	return done
}

func (s *gatedServer) received() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.got...)
}

func TestAnApplyWriteWaitsForTheRollbackInProgress(t *testing.T) {
	reg := prometheus.NewRegistry()
	g := NewRollbackGate(time.Minute, reg)
	s := newGatedServer(t, g)

	release := g.Hold()
	patch := s.send(t, http.MethodPatch)
	<-s.send(t, http.MethodGet) // a read never waits
	select {
	case <-patch:
		t.Fatal("the write was sent while a rollback held the gate")
	case <-time.After(200 * time.Millisecond):
	}
	require.Equal(t, []string{http.MethodGet}, s.received())

	release()
	release() // twice changes nothing
	select {
	case <-patch:
	case <-time.After(10 * time.Second):
		t.Fatal("the write still waits after the rollback ended")
	}
	require.Equal(t, []string{http.MethodGet, http.MethodPatch}, s.received())
	require.Equal(t, 1, testutil.CollectAndCount(reg, "kerf_leader_apply_yield_seconds"))

	// With the gate open again, a write is sent at once.
	<-s.send(t, http.MethodPost)
	require.Equal(t, []string{http.MethodGet, http.MethodPatch, http.MethodPost}, s.received())
}

func TestTheGateStaysHeldUntilEveryRollbackEnds(t *testing.T) {
	g := NewRollbackGate(time.Minute, prometheus.NewRegistry())
	s := newGatedServer(t, g)
	first, second := g.Hold(), g.Hold()
	put := s.send(t, http.MethodPut)
	first()
	first()
	select {
	case <-put:
		t.Fatal("the write was sent while a second rollback still held the gate")
	case <-time.After(200 * time.Millisecond):
	}
	second()
	select {
	case <-put:
	case <-time.After(10 * time.Second):
		t.Fatal("the write still waits after both rollbacks ended")
	}
}

func TestAWriteWaitsForRollbacksNoLongerThanTheLimit(t *testing.T) {
	reg := prometheus.NewRegistry()
	g := NewRollbackGate(50*time.Millisecond, reg)
	s := newGatedServer(t, g)
	release := g.Hold()
	defer release()
	select {
	case <-s.send(t, http.MethodDelete):
	case <-time.After(10 * time.Second):
		t.Fatal("the write waited past the gate's limit")
	}
	require.Equal(t, []string{http.MethodDelete}, s.received())

	// No gate at all lets everything through.
	var none *RollbackGate
	none.Hold()()
	none.wait(context.Background())
}
