package stream

import (
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
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
	// MaxContainers is how many containers one stream may index at once;
	// zero means DefaultMaxContainers.
	MaxContainers int
	// MaxMessageBytes is the largest message NewGRPCServer accepts; zero
	// means streamv1.MaxMessageBytes.
	MaxMessageBytes int
}

// Server is the leader's stream service (docs/design.md section 6). It is
// safe for concurrent use by many streams.
type Server struct {
	streamv1.UnimplementedStreamServer

	cfg     Config
	log     *slog.Logger
	metrics *metrics
	reviews reviewCache

	nodesMu sync.Mutex
	nodes   map[string]*nodeState
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
	return &Server{cfg: cfg, log: cfg.Log, metrics: newMetrics(cfg.Registerer), nodes: map[string]*nodeState{}}, nil
}

// NewGRPCServer returns a gRPC server with srv registered, TLS from
// tlsConfig and srv's message size limit. tlsConfig must not be nil: the
// agents' tokens travel on this connection.
func NewGRPCServer(srv *Server, tlsConfig *tls.Config) *grpc.Server {
	if tlsConfig == nil {
		panic("stream: NewGRPCServer needs a TLS config")
	}
	g := grpc.NewServer(
		grpc.Creds(credentials.NewTLS(tlsConfig)),
		grpc.MaxRecvMsgSize(srv.cfg.MaxMessageBytes),
		// Agents ping every streamv1.KeepaliveTime on an open stream; a ping more
		// often than half of it is abuse (GOAWAY "too_many_pings").
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: streamv1.KeepaliveTime / 2}),
		// The leader pings a quiet agent too, so a stream to a vanished
		// node ends (and its gauge drops) within two minutes.
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: 2 * streamv1.KeepaliveTime, Timeout: streamv1.KeepaliveTimeout}),
	)
	streamv1.RegisterStreamServer(g, srv)
	return g
}

// Connect implements streamv1.StreamServer: it authenticates the agent,
// checks its Hello against the node of its pod, then ingests its reports
// until the agent closes the stream or sends a malformed message.
func (s *Server) Connect(st grpc.BidiStreamingServer[streamv1.AgentMessage, streamv1.LeaderMessage]) error {
	if !s.cfg.Leading() {
		return s.refuse(codes.Unavailable, "not_leader", "not the leader")
	}
	a, err := s.authenticate(st.Context())
	if err != nil {
		return err
	}
	first, err := st.Recv()
	if err != nil {
		return recvErr(err)
	}
	hello := first.GetHello()
	if hello == nil {
		return s.refuse(codes.InvalidArgument, "no_hello", "the first message must be a Hello")
	}
	if hello.GetNodeName() != a.node {
		return s.refuse(codes.PermissionDenied, "node_mismatch", "hello.node_name %q is not the node %q of agent pod %s", hello.GetNodeName(), a.node, a.pod)
	}
	log := s.log.With("node", a.node, "agentPod", a.pod, "bootID", hello.GetBootId())
	log.Info("agent connected", "agentVersion", hello.GetAgentVersion(), "oomSource", hello.GetOomSource().String(),
		"agentStart", time.Unix(0, hello.GetStartedAtUnixNs()))
	s.metrics.connected.Inc()
	defer s.metrics.connected.Dec()

	in := newIngest(s, a.node, hello)
	for {
		msg, err := st.Recv()
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
			err = in.counters(b.Counters)
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
		if err != nil {
			var m *malformedError
			if errors.As(err, &m) {
				log.Warn("closing stream", "reason", m.reason, "err", m.msg)
				return s.refuse(m.code, m.reason, "%s", m.msg)
			}
			return err
		}
		if reply != nil {
			if err := st.Send(reply); err != nil {
				return err
			}
		}
	}
}

// recvErr turns the end of the agent's side into a clean return.
func recvErr(err error) error {
	if errors.Is(err, io.EOF) {
		return nil
	}
	return err
}
