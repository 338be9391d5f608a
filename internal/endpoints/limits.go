package endpoints

import (
	"context"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"
)

// Limits bound what one HTTP server spends on its clients: how long a
// request may take to arrive and its answer to leave, how long an idle
// connection stays, how large the headers may be and how many requests
// are served at once. Every Kerf HTTP server runs with them (docs/security.md,
// "Every HTTP server bounded").
type Limits struct {
	// ReadHeaderTimeout bounds the request line and headers: a client
	// that never finishes them (slowloris) is cut off.
	ReadHeaderTimeout time.Duration
	// ReadTimeout bounds the whole request, body included: a trickled
	// body is cut off.
	ReadTimeout time.Duration
	// WriteTimeout bounds the answer, from the end of the headers' read.
	// No Kerf endpoint streams a long answer (a /metrics page, an audit
	// page of at most audit.MaxLimit actions, a web page).
	WriteTimeout time.Duration
	// IdleTimeout closes a kept-alive connection with no request.
	IdleTimeout time.Duration
	// MaxHeaderBytes bounds the request line and headers; over it the
	// client gets 431 Request Header Fields Too Large.
	MaxHeaderBytes int
	// MaxInFlight bounds the requests served at once; over it a request
	// gets 503 with Retry-After (exempt paths aside). Zero means no cap.
	MaxInFlight int
	// MaxNewInFlight bounds, apart from MaxInFlight, the requests of
	// callers the server does not know yet (ServerKnowing): a flood of
	// new or bad tokens fills this budget, not the known callers'.
	MaxNewInFlight int
	// MaxInFlightPerCaller bounds, within MaxInFlight, the requests of one
	// known caller (by user name): a known token, stolen or gone wrong,
	// takes that share of the known callers' budget and no more, each of
	// its requests perhaps waiting on access reviews.
	MaxInFlightPerCaller int
	// RetryAfter is what the 503 of MaxInFlight asks the client to wait.
	RetryAfter time.Duration
}

// DefaultLimits are the limits of a Kerf endpoint: 10 s for the headers,
// 30 s for the request and for the answer (the admission webhook's
// values), 90 s idle, 64 KiB of headers (a bearer token is 1-2 KiB) and 64
// requests at once, each of which may wait on a TokenReview, at most 16
// of them of one caller, plus 16 of callers not known yet.
func DefaultLimits() Limits {
	return Limits{
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       90 * time.Second,
		MaxHeaderBytes:    64 << 10,
		MaxInFlight:       64,
		MaxNewInFlight:    16,
		// A quarter of MaxInFlight: four callers at their cap leave
		// nothing, a scraper and a reader at theirs leave half.
		MaxInFlightPerCaller: 16,
		RetryAfter:           time.Second,
	}
}

// Server returns an http.Server that serves h within l: its timeouts and
// header limit, and h behind InFlight (the exempt paths, such as the
// kubelet's probes, are served whatever the load, so that a flood does
// not make the kubelet restart the pod).
func (l Limits) Server(h http.Handler, exempt ...string) *http.Server {
	return l.server(InFlight(h, l.MaxInFlight, l.RetryAfter, exempt...))
}

// ServerKnowing is Server with two budgets: the requests known says come
// from a caller the server knows (a bearer token found valid lately, and
// the caller's name) are served within MaxInFlight, at most
// MaxInFlightPerCaller of them for one caller, the others within
// MaxNewInFlight. A flood of strangers, or of bad tokens each waiting on
// a review, then cannot lock the known callers out, nor can one known
// caller.
func (l Limits) ServerKnowing(h http.Handler, known func(*http.Request) (string, bool), exempt ...string) *http.Server {
	perCaller := perCallerInFlight(h, l.MaxInFlightPerCaller, l.RetryAfter)
	knownLane := InFlight(perCaller, l.MaxInFlight, l.RetryAfter, exempt...)
	newLane := InFlight(h, l.MaxNewInFlight, l.RetryAfter, exempt...)
	return l.server(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if name, ok := known(r); ok {
			knownLane.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), callerKey{}, name)))
			return
		}
		newLane.ServeHTTP(w, r)
	}))
}

// callerKey holds a known caller's name in a request's context, for
// perCallerInFlight.
type callerKey struct{}

// perCallerInFlight serves at most limit requests of h at once per caller
// named in the request's context (callerKey); one more gets 503 as in
// InFlight. It sits behind InFlight's cap, so it counts at most that many
// callers. A limit of 0 or less returns h.
func perCallerInFlight(h http.Handler, limit int, retryAfter time.Duration) http.Handler {
	if limit <= 0 {
		return h
	}
	var mu sync.Mutex
	inFlight := map[string]int{}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name, _ := r.Context().Value(callerKey{}).(string)
		mu.Lock()
		if inFlight[name] >= limit {
			mu.Unlock()
			refuse(w, retryAfter)
			return
		}
		inFlight[name]++
		mu.Unlock()
		defer func() {
			mu.Lock()
			if inFlight[name]--; inFlight[name] == 0 {
				delete(inFlight, name)
			}
			mu.Unlock()
		}()
		h.ServeHTTP(w, r)
	})
}

func (l Limits) server(h http.Handler) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: l.ReadHeaderTimeout,
		ReadTimeout:       l.ReadTimeout,
		WriteTimeout:      l.WriteTimeout,
		IdleTimeout:       l.IdleTimeout,
		MaxHeaderBytes:    l.MaxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(slog.Default().Handler(), slog.LevelWarn),
	}
}

// InFlight serves at most limit requests of h at once; one more gets 503
// Service Unavailable with Retry-After (retryAfter rounded up to seconds,
// at least 1). Requests for the exempt paths are always served. A limit
// of 0 or less returns h.
func InFlight(h http.Handler, limit int, retryAfter time.Duration, exempt ...string) http.Handler {
	if limit <= 0 {
		return h
	}
	slots := make(chan struct{}, limit)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if slices.Contains(exempt, r.URL.Path) {
			h.ServeHTTP(w, r)
			return
		}
		select {
		case slots <- struct{}{}:
		default:
			refuse(w, retryAfter)
			return
		}
		defer func() { <-slots }()
		h.ServeHTTP(w, r)
	})
}

// refuse answers 503 Service Unavailable with Retry-After (retryAfter
// rounded up to seconds, at least 1).
func refuse(w http.ResponseWriter, retryAfter time.Duration) {
	secs := max(1, int((retryAfter+time.Second-1)/time.Second))
	w.Header().Set("Retry-After", strconv.Itoa(secs))
	// The connection closes after the answer: net/http would otherwise
	// read the request's unread body (up to 256 KiB) before answering,
	// which a trickled body holds up for the server's whole read timeout.
	w.Header().Set("Connection", "close")
	http.Error(w, "too many requests in flight; try again shortly", http.StatusServiceUnavailable)
}
