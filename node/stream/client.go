package stream

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	streamv1 "github.com/kerf-dev/kerf/api/stream/v1"
	"github.com/kerf-dev/kerf/node/oom"
	"github.com/kerf-dev/kerf/node/report"
)

// Defaults of Config.
const (
	// DefaultMaxBufferedOOM is how many unacknowledged OOM events the
	// client keeps.
	DefaultMaxBufferedOOM = 10000
	// DefaultOOMReplay is how long an acknowledged OOM event is kept and
	// sent again to every new stream: a leader that takes over learns the
	// kills its predecessor acknowledged (a health watch counts kills since
	// its change, up to its watchDuration: 30 minutes by default).
	DefaultOOMReplay = 2 * time.Hour
	// DefaultMaxReplayOOM bounds the acknowledged OOM events kept for
	// replay; past it the oldest go.
	DefaultMaxReplayOOM = 1000
	// DefaultMaxBufferedEvents is how many unacknowledged container events
	// the client keeps.
	DefaultMaxBufferedEvents = 10000
	// DefaultMinBackoff is the first wait before a reconnect.
	DefaultMinBackoff = 500 * time.Millisecond
	// DefaultMaxBackoff is the longest wait before a reconnect.
	DefaultMaxBackoff = 30 * time.Second
)

// Values of Client.State.
const (
	// Connected means the Hello and snapshot went out on an open stream.
	Connected = "connected"
	// Connecting means a connection and stream are being opened.
	Connecting = "connecting"
	// Disconnected means no stream is open: Run waits to retry, has not
	// started or has returned.
	Disconnected = "disconnected"
)

// states lists the values of the state gauge's label.
var states = []string{Connected, Connecting, Disconnected}

// stableStream is how long a stream must stay open for the backoff to start
// again from its minimum.
const stableStream = 10 * time.Second

// Config is what a Client needs.
type Config struct {
	// Addr is the leader's stream address, host:port.
	Addr string
	// TLS is the client's TLS config; it must not be nil, since the token
	// travels on the connection.
	TLS *tls.Config
	// CAFile, when set, is the PEM file of the CAs the client trusts for
	// the leader (kerf-agent --leader-ca): it is read again on each
	// connect, so a CA rotated in its Secret or ConfigMap is used from the
	// next connection on, and replaces TLS.RootCAs.
	CAFile string
	// TokenFile is the projected service-account token with the leader's
	// audience; it is read again on each connect, since the kubelet
	// rotates it.
	TokenFile string
	// NodeName is the node the agent runs on, sent in the Hello.
	NodeName string
	// OOMSource is the OOM source the agent chose: "bpf", "cgroup", "kmsg"
	// or empty when unknown.
	OOMSource string
	// AgentVersion and BootID are sent in the Hello; both may be empty.
	AgentVersion, BootID string
	// MetricsCSR, when set, is sent in every Hello: a certificate request
	// (DER) for the key the agent serves /metrics with. The leader's
	// answer goes to OnMetricsCertificate.
	MetricsCSR []byte
	// OnMetricsCertificate receives each /metrics certificate the leader
	// issues (PEM); nil ignores them.
	OnMetricsCertificate func(certPEM []byte)
	// MaxBufferedOOM bounds the unacknowledged OOM events kept; past it the
	// oldest is dropped and counted. Zero means DefaultMaxBufferedOOM.
	MaxBufferedOOM int
	// MaxBufferedEvents bounds the unacknowledged container events kept,
	// like MaxBufferedOOM. Zero means DefaultMaxBufferedEvents.
	MaxBufferedEvents int
	// MinBackoff and MaxBackoff bound the wait, with jitter, between
	// reconnects; zero means DefaultMinBackoff and DefaultMaxBackoff.
	MinBackoff, MaxBackoff time.Duration
	// Registerer receives the client's metrics; nil means a private
	// registry.
	Registerer prometheus.Registerer
	// Log is the client's logger; nil means slog.Default().
	Log *slog.Logger
	// Dial, when set, opens the connection to addr (a test's simulated
	// node dials from an address of its own); nil dials TCP as gRPC does.
	Dial func(ctx context.Context, addr string) (net.Conn, error)
}

// Client is the agent's end of the stream to the leader (docs/design.md
// sections 5 and 6). While the leader is unreachable it keeps the latest
// counters of each container (newest win) and every unacknowledged OOM
// event and container event (each bounded, oldest dropped), and on each
// connect sends a Hello, a full snapshot and the unacknowledged events
// again. It is safe for concurrent use.
type Client struct {
	cfg  Config
	log  *slog.Logger
	clk  kernelClock
	wake chan struct{}
	// caSum is the hash of the CA file last read; only connect uses it.
	caSum [sha256.Size]byte

	mu      sync.Mutex
	state   string
	latest  map[report.ContainerKey]report.Sample
	dirty   map[report.ContainerKey]struct{}
	removed map[report.ContainerKey]struct{}
	ooms    buffer[*streamv1.OOMEvent]
	// replay are acknowledged OOM events younger than DefaultOOMReplay,
	// by seq, sent again at the start of every stream.
	replay []*streamv1.OOMEvent
	events buffer[*streamv1.ContainerEvent]
	resync bool

	sent    prometheus.Counter
	stateG  *prometheus.GaugeVec
	connErr prometheus.Counter
}

// NewClient returns a client for cfg, or an error naming the field that is
// missing or wrong.
func NewClient(cfg Config) (*Client, error) {
	switch {
	case cfg.Addr == "":
		return nil, errors.New("stream client config: Addr is required")
	case cfg.TLS == nil:
		return nil, errors.New("stream client config: TLS is required (the token travels on the connection)")
	case cfg.TokenFile == "":
		return nil, errors.New("stream client config: TokenFile is required")
	case cfg.NodeName == "":
		return nil, errors.New("stream client config: NodeName is required")
	case cfg.MaxBufferedOOM < 0 || cfg.MaxBufferedEvents < 0 || cfg.MinBackoff < 0 || cfg.MaxBackoff < 0:
		return nil, errors.New("stream client config: MaxBufferedOOM, MaxBufferedEvents, MinBackoff and MaxBackoff must not be negative")
	}
	if _, err := oomSourceEnum(cfg.OOMSource); err != nil {
		return nil, err
	}
	if cfg.MaxBufferedOOM == 0 {
		cfg.MaxBufferedOOM = DefaultMaxBufferedOOM
	}
	if cfg.MaxBufferedEvents == 0 {
		cfg.MaxBufferedEvents = DefaultMaxBufferedEvents
	}
	if cfg.MinBackoff == 0 {
		cfg.MinBackoff = DefaultMinBackoff
	}
	if cfg.MaxBackoff == 0 {
		cfg.MaxBackoff = DefaultMaxBackoff
	}
	if cfg.MaxBackoff < cfg.MinBackoff {
		return nil, fmt.Errorf("stream client config: MaxBackoff %v is less than MinBackoff %v", cfg.MaxBackoff, cfg.MinBackoff)
	}
	if cfg.Registerer == nil {
		cfg.Registerer = prometheus.NewRegistry()
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	clk, err := newKernelClock()
	if err != nil {
		return nil, err
	}
	c := &Client{
		cfg:     cfg,
		log:     cfg.Log,
		clk:     clk,
		wake:    make(chan struct{}, 1),
		state:   Disconnected,
		latest:  map[report.ContainerKey]report.Sample{},
		dirty:   map[report.ContainerKey]struct{}{},
		removed: map[report.ContainerKey]struct{}{},
		ooms: buffer[*streamv1.OOMEvent]{what: "OOM event", limit: cfg.MaxBufferedOOM,
			drops: prometheus.NewCounter(prometheus.CounterOpts{
				Name: "kerf_agent_stream_buffer_drops_total",
				Help: "Unacknowledged OOM events dropped, oldest first, because the buffer was full.",
			})},
		events: buffer[*streamv1.ContainerEvent]{what: "container event", limit: cfg.MaxBufferedEvents,
			drops: prometheus.NewCounter(prometheus.CounterOpts{
				Name: "kerf_agent_stream_container_event_drops_total",
				Help: "Unacknowledged container events dropped, oldest first, because the buffer was full.",
			})},
		sent: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "kerf_agent_stream_samples_sent_total",
			Help: "Container counter samples the agent sent to the leader.",
		}),
		stateG: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "kerf_agent_stream_state",
			Help: "1 for the stream's current state (connected, connecting, disconnected), 0 for the others.",
		}, []string{"state"}),
		connErr: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "kerf_agent_stream_disconnects_total",
			Help: "Streams to the leader that failed or ended.",
		}),
	}
	buffered := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "kerf_agent_stream_buffered_oom_events",
		Help: "OOM events kept until the leader acknowledges them.",
	}, func() float64 { return float64(c.bufferedOOM()) })
	bufferedEvents := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "kerf_agent_stream_buffered_container_events",
		Help: "Container events kept until the leader acknowledges them.",
	}, func() float64 { return float64(c.bufferedEvents()) })
	for _, m := range []prometheus.Collector{c.sent, c.ooms.drops, c.events.drops, c.stateG, c.connErr, buffered, bufferedEvents} {
		if err := cfg.Registerer.Register(m); err != nil {
			return nil, fmt.Errorf("register stream metrics: %w", err)
		}
	}
	c.setState(Disconnected)
	return c, nil
}

// oomSourceEnum maps an oom.Kind to the protocol's OOMSource.
func oomSourceEnum(s string) (streamv1.OOMSource, error) {
	switch s {
	case "":
		return streamv1.OOMSource_OOM_SOURCE_UNSPECIFIED, nil
	case oom.KindBPF:
		return streamv1.OOMSource_OOM_SOURCE_BPF, nil
	case oom.KindCgroup:
		return streamv1.OOMSource_OOM_SOURCE_CGROUP, nil
	case oom.KindKmsg:
		return streamv1.OOMSource_OOM_SOURCE_KMSG, nil
	case oom.KindOff:
		return streamv1.OOMSource_OOM_SOURCE_OFF, nil
	}
	return 0, fmt.Errorf("stream client config: OOMSource %q: want one of bpf, cgroup, kmsg, off or empty", s)
}

// Counters records one sampling pass (typically Sampler.Changed): the
// newest sample of each container replaces the one not yet sent, so what
// is kept while the leader is unreachable is bounded by the number of
// containers. A usage not yet sent is kept on the sample that replaces it
// when that one has none, and folded into its peak when it has one, so the
// leader still learns the highest memory of the readings it missed (at the
// later sample's time).
func (c *Client) Counters(samples []report.Sample) {
	if len(samples) == 0 {
		return
	}
	c.mu.Lock()
	for _, s := range samples {
		if old, unsent := c.latest[s.Key]; unsent && old.HasUsage {
			if _, dirty := c.dirty[s.Key]; dirty {
				switch {
				case !s.HasUsage && s.Periods >= old.Periods: // the same container still
					s.Usage, s.HasUsage = old.Usage, true
				case s.Usage.CPU >= old.Usage.CPU: // not a restarted container
					s.Usage.Peak = max(s.Usage.Peak, old.Usage.Peak)
				}
			}
		}
		c.latest[s.Key] = s
		c.dirty[s.Key] = struct{}{}
		delete(c.removed, s.Key)
	}
	c.mu.Unlock()
	c.notify()
}

// Remove forgets a container whose cgroup is gone; the leader is told on
// the open stream, if any.
func (c *Client) Remove(k report.ContainerKey) {
	c.mu.Lock()
	if _, ok := c.latest[k]; ok {
		delete(c.latest, k)
		delete(c.dirty, k)
		c.removed[k] = struct{}{}
	}
	c.mu.Unlock()
	c.notify()
}

// State returns Connected, Connecting or Disconnected.
func (c *Client) State() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.state
}

func (c *Client) setState(s string) {
	c.mu.Lock()
	c.state = s
	c.mu.Unlock()
	for _, v := range states {
		g := 0.0
		if v == s {
			g = 1
		}
		c.stateG.WithLabelValues(v).Set(g)
	}
}

// notify wakes the open stream, if any, to flush what was recorded.
func (c *Client) notify() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// Run keeps a stream to the leader open until ctx ends, reconnecting with
// a jittered exponential backoff; it returns ctx's error.
func (c *Client) Run(ctx context.Context) error {
	defer c.setState(Disconnected)
	backoff := c.cfg.MinBackoff
	for {
		start := time.Now()
		err := c.connect(ctx)
		c.setState(Disconnected)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		c.connErr.Inc()
		if time.Since(start) >= stableStream {
			backoff = c.cfg.MinBackoff
		}
		// Equal jitter: wait between half the backoff and all of it.
		wait := backoff/2 + rand.N(backoff/2+1)
		c.log.Warn("stream to leader ended", "addr", c.cfg.Addr, "err", err, "retryIn", wait)
		backoff = min(2*backoff, c.cfg.MaxBackoff)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}
