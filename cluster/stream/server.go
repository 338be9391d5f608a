package stream

import (
	"context"
	"crypto"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"
	"k8s.io/client-go/kubernetes"

	streamv1 "github.com/kerf-dev/kerf/api/stream/v1"
	"github.com/kerf-dev/kerf/cluster/signals"
)

// Defaults of Config.
const (
	// DefaultReviewTTL is how long a positive TokenReview is reused.
	DefaultReviewTTL = time.Minute
	// DefaultMaxContainers is how many containers one stream may index at
	// once.
	DefaultMaxContainers = 2000
	// DefaultMaxStreams is how many authenticated streams the leader
	// serves at once: one per node, far above a cluster's nodes.
	DefaultMaxStreams = 10000
	// DefaultMaxHandshakes is how many streams may be authenticating at
	// once (TokenReview, agent pod lookup, Hello).
	DefaultMaxHandshakes = 64
	// DefaultHandshakeTimeout bounds a connection's TLS handshake and a
	// stream's authentication up to its Hello.
	DefaultHandshakeTimeout = 5 * time.Second
	// DefaultReauthEvery is how often an open stream's token is reviewed
	// again (never from the cache); a token that no longer authenticates
	// closes the stream.
	DefaultReauthEvery = 5 * time.Minute
	// DefaultMaxStreamAge bounds a connection's life (gRPC
	// MaxConnectionAge, with DefaultMaxStreamAgeGrace for the open stream
	// to end): the agent reconnects, reading its token and CA anew.
	DefaultMaxStreamAge = time.Hour
	// DefaultMaxStreamAgeGrace is how long a stream may outlive
	// MaxStreamAge.
	DefaultMaxStreamAgeGrace = time.Minute
	// DefaultFailedReviewTTL is how long a token that failed its
	// TokenReview is refused without another review.
	DefaultFailedReviewTTL = 10 * time.Second
	// DefaultReviewsPerSecond and DefaultReviewBurst bound the failed
	// authentications one source IP may cause. A failed one is a
	// TokenReview that refused the token, or a token that is not an
	// agent's. Past them its cache misses are refused until the budget
	// refills. Reviews that pass cost nothing.
	DefaultReviewsPerSecond = 1
	// DefaultReviewBurst is the burst of DefaultReviewsPerSecond.
	DefaultReviewBurst = 20
	// DefaultMaxPendingOOM bounds the OOM events about pods the leader's
	// cache does not hold yet, kept per agent until the pod appears.
	DefaultMaxPendingOOM = 1000
	// DefaultPendingOOMTTL is how long such an event is kept before it
	// expires (counted in kerf_stream_oom_events_expired_total).
	DefaultPendingOOMTTL = 2 * time.Minute
)

// apiTimeout bounds each apiserver call made while a stream opens.
const apiTimeout = 10 * time.Second

// Config is what a Server needs.
type Config struct {
	// Audience is the audience the agents' tokens must carry, e.g.
	// "kerf-leader".
	Audience string
	// ServiceAccountNamespace and ServiceAccountName name the agents'
	// service account; tokens of any other user are refused.
	ServiceAccountNamespace string
	// ServiceAccountName is the agents' service account's name.
	ServiceAccountName string
	// Clientset runs the TokenReviews, and reads an agent pod that Pods
	// does not hold yet.
	Clientset kubernetes.Interface
	// Pods is the leader's pod cache, indexed by UID.
	Pods Pods
	// Kernel receives the samples and OOM kills.
	Kernel *signals.Kernel
	// Statuses receives the container events (restarts, terminations the
	// agents saw in the kubelet's Pods API); nil checks and acknowledges
	// them only.
	Statuses *signals.AgentStatuses
	// Usage receives the containers' usage readings (CPU, working set,
	// memory peak) for the recommender; nil decodes and checks them only.
	Usage *signals.Usage
	// Leading reports whether this replica is the elected leader; only the
	// leader serves.
	Leading func() bool
	// IssueMetricsCertificate signs the /metrics certificate an agent
	// asks for in its Hello (metrics_csr), for the request's public key
	// and the node the agent's token proved; nil issues none.
	IssueMetricsCertificate func(pub crypto.PublicKey, node string) ([]byte, error)
	// Registerer receives the stream's metrics; nil means a private
	// registry.
	Registerer prometheus.Registerer
	// Log is the stream's logger; nil means slog.Default().
	Log *slog.Logger
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// ReviewTTL is how long a positive TokenReview is reused; zero means
	// DefaultReviewTTL.
	ReviewTTL time.Duration
	// MaxMessageBytes is the largest message NewGRPCServer accepts; zero
	// means streamv1.MaxMessageBytes.
	MaxMessageBytes int
	// Limits bound what agents and unauthenticated callers may cost the
	// leader; zero fields take their defaults.
	Limits
}

// Limits bound the stream's use of the leader's memory and of the
// apiserver (docs/security.md); zero fields mean their Default.
type Limits struct {
	// MaxContainers is how many containers one stream may index at once;
	// zero means DefaultMaxContainers.
	MaxContainers int
	// MaxStreams bounds the authenticated streams served at once; zero
	// means DefaultMaxStreams. A node has one stream at most: a new one
	// replaces (closes) the older.
	MaxStreams int
	// MaxHandshakes bounds the streams authenticating at once; zero means
	// DefaultMaxHandshakes.
	MaxHandshakes int
	// HandshakeTimeout bounds the TLS handshake and, separately, a
	// stream's authentication up to its Hello; zero means
	// DefaultHandshakeTimeout.
	HandshakeTimeout time.Duration
	// ReauthEvery is how often an open stream's token is reviewed again;
	// zero means DefaultReauthEvery.
	ReauthEvery time.Duration
	// MaxStreamAge bounds a connection's life; zero means
	// DefaultMaxStreamAge.
	MaxStreamAge time.Duration
	// FailedReviewTTL is how long a failed token is refused without a
	// review; zero means DefaultFailedReviewTTL.
	FailedReviewTTL time.Duration
	// ReviewsPerSecond and ReviewBurst bound the failed authentications
	// per source IP (reviews that pass are not counted); zero means
	// DefaultReviewsPerSecond and DefaultReviewBurst.
	ReviewsPerSecond float64
	// ReviewBurst is the burst of ReviewsPerSecond.
	ReviewBurst int
	// MaxPendingOOM bounds the OOM events kept per agent about pods the
	// cache does not hold yet; zero means DefaultMaxPendingOOM.
	MaxPendingOOM int
	// PendingOOMTTL is how long such an event waits for its pod; zero
	// means DefaultPendingOOMTTL.
	PendingOOMTTL time.Duration
}

// Server is the leader's stream service (docs/design.md section 6). It is
// safe for concurrent use by many streams.
type Server struct {
	streamv1.UnimplementedStreamServer

	cfg     Config
	log     *slog.Logger
	metrics *metrics
	reviews reviewCache
	// failed caches the tokens whose review failed, briefly.
	failed reviewCache
	// sources are the failure budgets of the source IPs that failed.
	sources failingSources
	// handshakes is a semaphore of the streams authenticating.
	handshakes chan struct{}

	nodesMu sync.Mutex
	nodes   map[string]*nodeState
	// streams counts the authenticated streams; nextStream numbers them.
	streams    int
	nextStream uint64
	// swept is when the states of nodes gone were last dropped.
	swept time.Time
}

// New returns a Server for cfg, or an error naming the missing field.
func New(cfg Config) (*Server, error) {
	switch {
	case cfg.Audience == "":
		return nil, errors.New("stream config: Audience is required")
	case cfg.ServiceAccountNamespace == "" || cfg.ServiceAccountName == "":
		return nil, errors.New("stream config: ServiceAccountNamespace and ServiceAccountName are required")
	case cfg.Clientset == nil:
		return nil, errors.New("stream config: Clientset is required")
	case cfg.Pods == nil:
		return nil, errors.New("stream config: Pods is required")
	case cfg.Kernel == nil:
		return nil, errors.New("stream config: Kernel is required")
	case cfg.Leading == nil:
		return nil, errors.New("stream config: Leading is required")
	case cfg.ReviewTTL < 0 || cfg.MaxContainers < 0 || cfg.MaxMessageBytes < 0:
		return nil, errors.New("stream config: ReviewTTL, MaxContainers and MaxMessageBytes must not be negative")
	case cfg.MaxStreams < 0 || cfg.MaxHandshakes < 0 || cfg.HandshakeTimeout < 0 || cfg.ReauthEvery < 0 || cfg.MaxStreamAge < 0:
		return nil, errors.New("stream config: MaxStreams, MaxHandshakes, HandshakeTimeout, ReauthEvery and MaxStreamAge must not be negative")
	case cfg.FailedReviewTTL < 0 || cfg.ReviewsPerSecond < 0 || cfg.ReviewBurst < 0 || cfg.MaxPendingOOM < 0 || cfg.PendingOOMTTL < 0:
		return nil, errors.New("stream config: FailedReviewTTL, ReviewsPerSecond, ReviewBurst, MaxPendingOOM and PendingOOMTTL must not be negative")
	}
	if cfg.Registerer == nil {
		cfg.Registerer = prometheus.NewRegistry()
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.ReviewTTL == 0 {
		cfg.ReviewTTL = DefaultReviewTTL
	}
	if cfg.MaxContainers == 0 {
		cfg.MaxContainers = DefaultMaxContainers
	}
	if cfg.MaxMessageBytes == 0 {
		cfg.MaxMessageBytes = streamv1.MaxMessageBytes
	}
	setDefault(&cfg.MaxStreams, DefaultMaxStreams)
	setDefault(&cfg.MaxHandshakes, DefaultMaxHandshakes)
	setDefault(&cfg.HandshakeTimeout, DefaultHandshakeTimeout)
	setDefault(&cfg.ReauthEvery, DefaultReauthEvery)
	setDefault(&cfg.MaxStreamAge, DefaultMaxStreamAge)
	setDefault(&cfg.FailedReviewTTL, DefaultFailedReviewTTL)
	setDefault(&cfg.ReviewsPerSecond, DefaultReviewsPerSecond)
	setDefault(&cfg.ReviewBurst, DefaultReviewBurst)
	setDefault(&cfg.MaxPendingOOM, DefaultMaxPendingOOM)
	setDefault(&cfg.PendingOOMTTL, DefaultPendingOOMTTL)
	return &Server{cfg: cfg, log: cfg.Log, metrics: newMetrics(cfg.Registerer), nodes: map[string]*nodeState{},
		handshakes: make(chan struct{}, cfg.MaxHandshakes)}, nil
}

// setDefault sets *v to def when it is zero.
func setDefault[T comparable](v *T, def T) {
	var zero T
	if *v == zero {
		*v = def
	}
}

// NewGRPCServer returns a gRPC server with srv registered, TLS from
// tlsConfig and srv's limits: message size, handshake time, connection age,
// streams per connection. tlsConfig must not be nil: the agents' tokens
// travel on this connection.
func NewGRPCServer(srv *Server, tlsConfig *tls.Config) *grpc.Server {
	return newGRPCServer(srv, tlsConfig, connectionBuffers()...)
}

// Per-connection buffers of the stream server's transports, made small.
//   - gRPC's default 32 KiB read buffer is held by every connection for
//     its life; on a TLS connection gRPC cannot pool it. Its cost is in
//     docs/performance.md, "Where the leader's memory goes".
//   - An agent sends a few KiB per sampling pass and the leader answers
//     with acks of a few bytes. So a read is rarely larger than the small
//     buffer, and a larger frame is read past it. bufio reads what does
//     not fit straight into the frame; TLS buffers the records below it
//     either way.
//   - The write buffer is already borrowed from a pool only while a
//     connection writes (gRPC's shared write buffer, its default). It is
//     made as small.
//   - The flow-control window is gRPC's: 64 KiB, grown by its BDP
//     estimate. It costs memory only for what arrived and was not read
//     yet, and Connect reads without pause.
const (
	// streamReadBuffer is each connection's read buffer.
	streamReadBuffer = 4 << 10
	// streamWriteBuffer is the size of the write buffers connections
	// borrow while they write.
	streamWriteBuffer = 4 << 10
)

// connectionBuffers are the transport options sizing each connection's
// buffers (see streamReadBuffer).
func connectionBuffers() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ReadBufferSize(streamReadBuffer),
		grpc.WriteBufferSize(streamWriteBuffer),
	}
}

// newGRPCServer is NewGRPCServer with extra options (the connection
// buffers; the tests compare with gRPC's defaults).
func newGRPCServer(srv *Server, tlsConfig *tls.Config, extra ...grpc.ServerOption) *grpc.Server {
	if tlsConfig == nil {
		panic("stream: NewGRPCServer needs a TLS config")
	}
	opts := []grpc.ServerOption{
		grpc.Creds(credentials.NewTLS(tlsConfig)),
		grpc.MaxRecvMsgSize(srv.cfg.MaxMessageBytes),
		// A connection that does not finish its TLS handshake in time is
		// closed (gRPC's default is 120 s).
		grpc.ConnectionTimeout(srv.cfg.HandshakeTimeout),
		// An agent opens one stream per connection.
		grpc.MaxConcurrentStreams(streamsPerConnection),
		// The headers are read before anything is authenticated: room for
		// the bearer token (MaxTokenBytes) and gRPC's own, not gRPC's
		// default of 16 MiB.
		grpc.MaxHeaderListSize(maxHeaderListBytes),
		// Agents ping every streamv1.KeepaliveTime on an open stream; a ping more
		// often than half of it is abuse (GOAWAY "too_many_pings").
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: streamv1.KeepaliveTime / 2}),
		// The leader pings a quiet agent too, so a stream to a vanished
		// node ends (and its gauge drops) within two minutes; and no
		// connection outlives MaxStreamAge (plus its grace): the agent
		// reconnects with its current token.
		// A connection with no stream for maxConnectionIdle is closed: an
		// agent keeps its stream open, so only a caller that opens
		// connections and leaves them idle is cut.
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: 2 * streamv1.KeepaliveTime, Timeout: streamv1.KeepaliveTimeout,
			MaxConnectionAge: srv.cfg.MaxStreamAge, MaxConnectionAgeGrace: DefaultMaxStreamAgeGrace,
			MaxConnectionIdle: maxConnectionIdle}),
	}
	g := grpc.NewServer(append(opts, extra...)...)
	streamv1.RegisterStreamServer(g, srv)
	return g
}

// streamsPerConnection is how many concurrent streams a connection may
// carry: an agent needs one, a reconnect may overlap.
const streamsPerConnection = 2

// maxHeaderListBytes bounds a stream's headers (MaxTokenBytes and gRPC's
// own), and maxConnectionIdle how long a connection may carry no stream.
const (
	maxHeaderListBytes = 16 << 10
	maxConnectionIdle  = 30 * time.Second
)

// received is one Recv's result.
type received struct {
	msg *streamv1.AgentMessage
	err error
}

// Connect implements streamv1.StreamServer. It authenticates the agent
// and checks its Hello against the node of its pod. Then it ingests its
// reports until one of these ends the stream:
//   - the agent closes it or sends a malformed message;
//   - its token stops authenticating;
//   - a newer stream of its node replaces it.
func (s *Server) Connect(st grpc.BidiStreamingServer[streamv1.AgentMessage, streamv1.LeaderMessage]) error {
	if !s.cfg.Leading() {
		return s.refuse(codes.Unavailable, "not_leader", "not the leader")
	}
	ctx, cancel := context.WithCancelCause(st.Context())
	defer cancel(nil)
	// One goroutine receives, so that the stream can end on something
	// else than a message (a deadline, a revoked token, a newer stream).
	// It is unbuffered: one message at a time is held. It starts only once
	// the token authenticated (handshake): before, nothing of the stream
	// is read but its headers, so an unauthenticated caller makes the
	// leader decode nothing (docs/security.md, "The agents' stream"). What
	// it sends waits in the transport's flow-control window (64 KiB).
	msgs := make(chan received)
	receive := func() <-chan received {
		go func() {
			for {
				m, err := st.Recv()
				select {
				case msgs <- received{m, err}:
				case <-ctx.Done():
					return
				}
				if err != nil {
					return
				}
			}
		}()
		return msgs
	}

	a, token, hello, err := s.handshake(ctx, receive)
	if err != nil {
		return err
	}
	id, err := s.claimNode(a.node, cancel)
	if err != nil {
		return err
	}
	log := s.log.With("node", a.node, "agentPod", a.pod, "bootID", hello.GetBootId())
	log.Info("agent connected", "agentVersion", hello.GetAgentVersion(), "oomSource", hello.GetOomSource().String(),
		"agentStart", time.Unix(0, hello.GetStartedAtUnixNs()))
	s.metrics.connected.Inc()
	defer s.metrics.connected.Dec()
	in := newIngest(s, a.node, hello)
	defer s.releaseNode(a.node, id)
	defer s.reauthenticate(ctx, cancel, token, log)()
	// answer closes the stream on err (a malformed message, with its
	// reason), else sends reply when there is one.
	answer := func(reply *streamv1.LeaderMessage, err error) error {
		if err != nil {
			var m *malformedError
			if errors.As(err, &m) {
				log.Warn("closing stream", "reason", m.reason, "err", m.msg)
				return s.refuse(m.code, m.reason, "%s: %s", m.reason, m.msg)
			}
			return err
		}
		if reply != nil {
			return st.Send(reply)
		}
		return nil
	}
	if len(hello.GetMetricsCsr()) > 0 {
		if err := answer(s.metricsCertificate(a.node, hello.GetMetricsCsr(), log)); err != nil {
			return err
		}
	}

	retry := time.NewTicker(pendingRetry)
	defer retry.Stop()
	for {
		var r received
		select {
		case r = <-msgs:
		case <-retry.C:
			in.retryPending()
			continue
		case <-ctx.Done():
			err := context.Cause(ctx)
			log.Info("closing stream", "err", err)
			return err
		}
		msg, err := r.msg, r.err
		if err != nil {
			log.Info("agent disconnected", "err", err)
			return recvErr(err)
		}
		if !s.cfg.Leading() {
			return s.refuse(codes.Unavailable, "not_leader", "no longer the leader")
		}
		var reply *streamv1.LeaderMessage
		switch b := msg.GetBody().(type) {
		case *streamv1.AgentMessage_Hello:
			err = malformed("hello_repeated", "hello was already sent")
		case *streamv1.AgentMessage_Counters:
			var resync bool
			if resync, err = in.counters(b.Counters); err == nil && resync {
				reply = &streamv1.LeaderMessage{Body: &streamv1.LeaderMessage_Resync{Resync: &streamv1.Resync{
					Reason: fmt.Sprintf("more than %d indexes given since the last snapshot", in.maxIndexes())}}}
			}
		case *streamv1.AgentMessage_OomEvent:
			var seq uint64
			if seq, err = in.oom(b.OomEvent); err == nil {
				reply = &streamv1.LeaderMessage{Body: &streamv1.LeaderMessage_Ack{Ack: &streamv1.Ack{OomSeq: seq}}}
			}
		case *streamv1.AgentMessage_ContainerEvent:
			var seq uint64
			if seq, err = in.containerEvent(b.ContainerEvent); err == nil {
				reply = &streamv1.LeaderMessage{Body: &streamv1.LeaderMessage_Ack{Ack: &streamv1.Ack{EventSeq: seq}}}
			}
		default:
			err = malformed("empty_message", "message has no body")
		}
		if err := answer(reply, err); err != nil {
			return err
		}
	}
}

// handshake authenticates the stream and reads its Hello within the
// handshake timeout, as one of at most MaxHandshakes at once. It starts
// receiving (receive) only once the token authenticated.
func (s *Server) handshake(ctx context.Context, receive func() <-chan received) (agent, string, *streamv1.Hello, error) {
	timer := time.NewTimer(s.cfg.HandshakeTimeout)
	defer timer.Stop()
	select {
	case s.handshakes <- struct{}{}:
		defer func() { <-s.handshakes }()
	case <-timer.C:
		return agent{}, "", nil, s.refuse(codes.ResourceExhausted, "too_many_handshakes", "more than %d streams authenticating at once", s.cfg.MaxHandshakes)
	case <-ctx.Done():
		return agent{}, "", nil, context.Cause(ctx)
	}
	hctx, cancel := context.WithTimeout(ctx, s.cfg.HandshakeTimeout)
	defer cancel()
	a, token, err := s.authenticate(hctx)
	if err != nil {
		return agent{}, "", nil, err
	}
	var r received
	select {
	case r = <-receive():
	case <-hctx.Done():
		return agent{}, "", nil, s.refuse(codes.DeadlineExceeded, "handshake_timeout", "no hello within %s", s.cfg.HandshakeTimeout)
	}
	if r.err != nil {
		return agent{}, "", nil, recvErr(r.err)
	}
	hello := r.msg.GetHello()
	if hello == nil {
		return agent{}, "", nil, s.refuse(codes.InvalidArgument, "no_hello", "the first message must be a Hello")
	}
	if hello.GetNodeName() != a.node {
		return agent{}, "", nil, s.refuse(codes.PermissionDenied, "node_mismatch", "hello.node_name %q is not the node %q of agent pod %s", hello.GetNodeName(), a.node, a.pod)
	}
	return a, token, hello, nil
}

// reauthenticate reviews the stream's token every ReauthEvery, never from
// the cache, and ends the stream once the token no longer authenticates.
//   - The first review comes sooner (firstReauth).
//   - A token no longer authenticates when revoked (its pod, secret or
//     service account deleted) or expired. An apiserver that cannot answer
//     leaves the stream open.
//   - The reviews run from a timer's callback, not a goroutine of the
//     stream's. A review would delay the stream's messages, and a
//     goroutine waiting between reviews is a stack per node
//     (docs/performance.md, "The eighth round").
//   - The returned stop ends them, and the stream's end (ctx) cancels one
//     under way.
func (s *Server) reauthenticate(ctx context.Context, cancel context.CancelCauseFunc, token string, log *slog.Logger) (stop func()) {
	var (
		mu      sync.Mutex
		stopped bool
		t       *time.Timer
	)
	mu.Lock() // t is set before its callback reads it
	defer mu.Unlock()
	t = time.AfterFunc(firstReauth(s.cfg.ReauthEvery), func() {
		_, err := s.tokenReview(ctx, token)
		var refused *refusal
		if errors.As(err, &refused) {
			s.reviews.forget(tokenKey(token))
			log.Warn("token no longer authenticates, closing stream", "err", err)
			cancel(s.refuse(codes.Unauthenticated, "token_revoked", "the stream's token no longer authenticates: %s", refused.msg))
			return
		}
		if err != nil && ctx.Err() == nil {
			log.Warn("token review of an open stream failed, keeping it open", "err", err)
		}
		mu.Lock()
		defer mu.Unlock()
		if !stopped && ctx.Err() == nil {
			t.Reset(s.cfg.ReauthEvery)
		}
	})
	return func() {
		mu.Lock()
		defer mu.Unlock()
		stopped = true
		t.Stop()
	}
}

// firstReauth is when an open stream's token is first reviewed again: at
// a random point of the second half of every, then every every. So
// streams opened together, as every agent reconnects at once after a
// leader's failover, do not have their tokens reviewed together. That
// would be a burst of a TokenReview per node on the apiserver, every
// interval ever after. A revoked token still closes its stream within
// every.
func firstReauth(every time.Duration) time.Duration {
	return every/2 + rand.N(every/2+1)
}

// recvErr turns the end of the agent's side into a clean return.
func recvErr(err error) error {
	if errors.Is(err, io.EOF) {
		return nil
	}
	return err
}
