package node

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"

	streamv1 "github.com/kerf-dev/kerf/api/stream/v1"
	"github.com/kerf-dev/kerf/node/oom"
)

// Defaults of StreamConfig.
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

// Values of StreamClient.State.
const (
	// StreamConnected means the Hello and snapshot went out on an open
	// stream.
	StreamConnected = "connected"
	// StreamConnecting means a connection and stream are being opened.
	StreamConnecting = "connecting"
	// StreamDisconnected means no stream is open: Run waits to retry, has
	// not started or has returned.
	StreamDisconnected = "disconnected"
)

// streamStates lists the values of the state gauge's label.
var streamStates = []string{StreamConnected, StreamConnecting, StreamDisconnected}

// maxCountersPerMessage bounds the containers of one Counters message, so a
// snapshot stays well under the leader's message size limit.
const maxCountersPerMessage = 500

// maxOOMCount is the largest OOMEvent.count the leader accepts
// (cluster/stream DefaultMaxOOMCount); larger counts are split.
const maxOOMCount = 1000

// Keepalive of the connection to the leader; cluster/stream's
// KeepaliveTime and KeepaliveTimeout, which the leader's enforcement policy
// allows.
const (
	keepaliveTime    = 30 * time.Second
	keepaliveTimeout = 10 * time.Second
)

// stableStream is how long a stream must stay open for the backoff to start
// again from its minimum.
const stableStream = 10 * time.Second

// StreamConfig is what a StreamClient needs.
type StreamConfig struct {
	// Addr is the leader's stream address, host:port.
	Addr string
	// TLS is the client's TLS config; it must not be nil, since the token
	// travels on the connection.
	TLS *tls.Config
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
}

// StreamClient is the agent's end of the stream to the leader
// (docs/design.md sections 5 and 6). While the leader is unreachable it
// keeps the latest counters of each container (newest win) and every
// unacknowledged OOM event and container event (each bounded, oldest
// dropped), and on each connect sends a Hello, a full snapshot and the
// unacknowledged events again. It is safe for concurrent use.
type StreamClient struct {
	cfg  StreamConfig
	log  *slog.Logger
	clk  kernelClock
	wake chan struct{}

	mu      sync.Mutex
	state   string
	latest  map[ContainerKey]Sample
	dirty   map[ContainerKey]struct{}
	removed map[ContainerKey]struct{}
	ooms    []*streamv1.OOMEvent // unacknowledged, by seq
	// replay are acknowledged OOM events younger than DefaultOOMReplay,
	// by seq, sent again at the start of every stream.
	replay []*streamv1.OOMEvent
	seq    uint64
	events []*streamv1.ContainerEvent // unacknowledged, by seq
	evSeq  uint64
	resync bool

	sent       prometheus.Counter
	drops      prometheus.Counter
	eventDrops prometheus.Counter
	stateG     *prometheus.GaugeVec
	connErr    prometheus.Counter
}

// NewStreamClient returns a client for cfg, or an error naming the field
// that is missing or wrong.
func NewStreamClient(cfg StreamConfig) (*StreamClient, error) {
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
	c := &StreamClient{
		cfg:     cfg,
		log:     cfg.Log,
		clk:     clk,
		wake:    make(chan struct{}, 1),
		state:   StreamDisconnected,
		latest:  map[ContainerKey]Sample{},
		dirty:   map[ContainerKey]struct{}{},
		removed: map[ContainerKey]struct{}{},
		sent: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "kerf_agent_stream_samples_sent_total",
			Help: "Container counter samples the agent sent to the leader.",
		}),
		drops: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "kerf_agent_stream_buffer_drops_total",
			Help: "Unacknowledged OOM events dropped, oldest first, because the buffer was full.",
		}),
		eventDrops: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "kerf_agent_stream_container_event_drops_total",
			Help: "Unacknowledged container events dropped, oldest first, because the buffer was full.",
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
	for _, m := range []prometheus.Collector{c.sent, c.drops, c.eventDrops, c.stateG, c.connErr, buffered, bufferedEvents} {
		if err := cfg.Registerer.Register(m); err != nil {
			return nil, fmt.Errorf("register stream metrics: %w", err)
		}
	}
	c.setState(StreamDisconnected)
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
// containers.
func (c *StreamClient) Counters(samples []Sample) {
	if len(samples) == 0 {
		return
	}
	c.mu.Lock()
	for _, s := range samples {
		c.latest[s.Key] = s
		c.dirty[s.Key] = struct{}{}
		delete(c.removed, s.Key)
	}
	c.mu.Unlock()
	c.notify()
}

// Remove forgets a container whose cgroup is gone; the leader is told on
// the open stream, if any.
func (c *StreamClient) Remove(k ContainerKey) {
	c.mu.Lock()
	if _, ok := c.latest[k]; ok {
		delete(c.latest, k)
		delete(c.dirty, k)
		c.removed[k] = struct{}{}
	}
	c.mu.Unlock()
	c.notify()
}

// OOM records an OOM kill of a container. It is kept until the leader
// acknowledges it; past MaxBufferedOOM unacknowledged events the oldest is
// dropped and counted.
func (c *StreamClient) OOM(k oom.Kill, podUID, container string) {
	count := max(k.Count, 1)
	c.mu.Lock()
	for count > 0 {
		n := min(count, maxOOMCount)
		count -= n
		c.seq++
		c.ooms = append(c.ooms, &streamv1.OOMEvent{
			Seq:       c.seq,
			PodUid:    podUID,
			Container: container,
			KernelNs:  k.KernelNS,
			Pid:       uint32(max(k.PID, 0)),
			Comm:      k.Comm,
			CgroupId:  k.CgroupID,
			Count:     n,
		})
	}
	c.ooms = dropOldest(c, c.ooms, c.cfg.MaxBufferedOOM, c.drops, "OOM event")
	c.mu.Unlock()
	c.notify()
}

// ContainerEvent records a container restart or termination that pod
// discovery saw, for the leader to act on before the apiserver has the pod
// status (docs/design.md section 3). It is kept until the leader
// acknowledges it; past MaxBufferedEvents unacknowledged events the oldest
// is dropped and counted.
func (c *StreamClient) ContainerEvent(ev ContainerEvent) {
	msg := &streamv1.ContainerEvent{
		PodUid:       ev.PodUID,
		Container:    ev.Container,
		RestartCount: ev.RestartCount,
		KernelNs:     c.clk.ns(time.Now()),
	}
	if t := ev.Terminated; t != nil {
		msg.Terminated = &streamv1.Termination{
			Reason:           t.Reason,
			ExitCode:         t.ExitCode,
			FinishedAtUnixNs: unixNs(t.FinishedAt.Time),
			ContainerId:      t.ContainerID,
			StartedAtUnixNs:  unixNs(t.StartedAt.Time),
		}
	}
	c.mu.Lock()
	c.evSeq++
	msg.Seq = c.evSeq
	c.events = append(c.events, msg)
	c.events = dropOldest(c, c.events, c.cfg.MaxBufferedEvents, c.eventDrops, "container event")
	c.mu.Unlock()
	c.notify()
}

// seqd is a buffered message: OOM events and container events, by seq.
type seqd interface{ GetSeq() uint64 }

// firstAfter returns the index of the first message of buf (ordered by
// seq) whose seq is above seq.
func firstAfter[T seqd](buf []T, seq uint64) int {
	i, _ := slices.BinarySearchFunc(buf, seq+1, func(e T, s uint64) int { return cmp.Compare(e.GetSeq(), s) })
	return i
}

// dropOldest keeps the newest limit messages of buf, counting and logging
// the dropped ones. c.mu is held.
func dropOldest[T seqd](c *StreamClient, buf []T, limit int, drops prometheus.Counter, what string) []T {
	over := len(buf) - limit
	if over <= 0 {
		return buf
	}
	drops.Add(float64(over))
	c.log.Warn(what+" buffer full, dropped the oldest", "dropped", over, "max", limit)
	return slices.Delete(buf, 0, over)
}

// unixNs returns t in Unix nanoseconds, 0 for the zero time.
func unixNs(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

// State returns "connected", "connecting" or "disconnected".
func (c *StreamClient) State() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.state
}

func (c *StreamClient) setState(s string) {
	c.mu.Lock()
	c.state = s
	c.mu.Unlock()
	for _, v := range streamStates {
		g := 0.0
		if v == s {
			g = 1
		}
		c.stateG.WithLabelValues(v).Set(g)
	}
}

// bufferedOOM returns how many OOM events await an acknowledgement.
func (c *StreamClient) bufferedOOM() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.ooms)
}

// bufferedEvents returns how many container events await an
// acknowledgement.
func (c *StreamClient) bufferedEvents() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.events)
}

func (c *StreamClient) notify() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// Run keeps a stream to the leader open until ctx ends, reconnecting with
// a jittered exponential backoff; it returns ctx's error.
func (c *StreamClient) Run(ctx context.Context) error {
	defer c.setState(StreamDisconnected)
	backoff := c.cfg.MinBackoff
	for {
		start := time.Now()
		err := c.connect(ctx)
		c.setState(StreamDisconnected)
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

// conn is one stream's state: the index table of the protocol (see
// streamv1.Counters) and the highest OOM and container event seqs sent on
// it.
type conn struct {
	st      grpc.BidiStreamingClient[streamv1.AgentMessage, streamv1.LeaderMessage]
	index   map[ContainerKey]*indexed
	next    uint32
	sentSeq uint64
	// replayed is set once the replay events went out on this stream.
	replayed  bool
	sentEvSeq uint64
}

// indexed is a container's index on a stream and what was last sent for it.
type indexed struct {
	idx  uint32
	last Sample
	ns   uint64
}

// connect opens one stream and serves it until it fails or ctx ends.
func (c *StreamClient) connect(ctx context.Context) error {
	c.setState(StreamConnecting)
	token, err := os.ReadFile(c.cfg.TokenFile)
	if err != nil {
		return fmt.Errorf("read token: %w", err)
	}
	cc, err := grpc.NewClient(c.cfg.Addr,
		grpc.WithTransportCredentials(credentials.NewTLS(c.cfg.TLS)),
		// Within the leader's enforcement policy (cluster/stream
		// KeepaliveTime): a leader gone without closing the connection is
		// noticed in under a minute.
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: keepaliveTime, Timeout: keepaliveTimeout}),
	)
	if err != nil {
		return fmt.Errorf("dial leader %s: %w", c.cfg.Addr, err)
	}
	defer func() { _ = cc.Close() }()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sctx := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+strings.TrimSpace(string(token)))
	st, err := streamv1.NewStreamClient(cc).Connect(sctx)
	if err != nil {
		return fmt.Errorf("open stream: %w", err)
	}
	source, _ := oomSourceEnum(c.cfg.OOMSource)
	err = st.Send(&streamv1.AgentMessage{Body: &streamv1.AgentMessage_Hello{Hello: &streamv1.Hello{
		NodeName:     c.cfg.NodeName,
		AgentVersion: c.cfg.AgentVersion,
		BootId:       c.cfg.BootID,
		OomSource:    source,
		FullSnapshot: true,
		// The leader anchors the stream's kernel times at the Hello's
		// arrival, so buffered counters keep their times.
		KernelNs: c.clk.ns(time.Now()),
		// The incarnation: OOM seqs are unique within it.
		StartedAtUnixNs: c.clk.at.UnixNano(),
	}}})
	if err != nil {
		return fmt.Errorf("send hello: %w", recvCause(st, err))
	}
	s := &conn{st: st}
	c.mu.Lock()
	c.resync = true // every stream starts with a snapshot
	c.mu.Unlock()
	if err := c.flush(s); err != nil {
		return recvCause(st, err)
	}
	c.setState(StreamConnected)
	c.log.Info("stream to leader open", "addr", c.cfg.Addr, "node", c.cfg.NodeName)

	recvDone := make(chan error, 1)
	go func() { recvDone <- c.receive(st) }()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-recvDone:
			return err
		case <-c.wake:
		}
		if err := c.flush(s); err != nil {
			if errors.Is(err, io.EOF) {
				// The stream ended; its status comes through Recv.
				return <-recvDone
			}
			return err
		}
	}
}

// recvCause returns the stream's status after a failed Send, when no
// other goroutine receives: gRPC reports the reason only through Recv.
func recvCause(st grpc.BidiStreamingClient[streamv1.AgentMessage, streamv1.LeaderMessage], err error) error {
	if !errors.Is(err, io.EOF) {
		return err
	}
	if _, rerr := st.Recv(); rerr != nil {
		return fmt.Errorf("%w (stream: %w)", err, rerr)
	}
	return err
}

// receive handles the leader's messages until the stream ends.
func (c *StreamClient) receive(st grpc.BidiStreamingClient[streamv1.AgentMessage, streamv1.LeaderMessage]) error {
	for {
		msg, err := st.Recv()
		if err != nil {
			return fmt.Errorf("receive: %w", err)
		}
		switch b := msg.GetBody().(type) {
		case *streamv1.LeaderMessage_Ack:
			c.ack(b.Ack.GetOomSeq(), b.Ack.GetEventSeq())
		case *streamv1.LeaderMessage_Resync:
			c.log.Info("leader asked for a snapshot", "reason", b.Resync.GetReason())
			c.mu.Lock()
			c.resync = true
			c.mu.Unlock()
			c.notify()
		}
	}
}

// ack drops the OOM events up to oomSeq and the container events up to
// eventSeq.
func (c *StreamClient) ack(oomSeq, eventSeq uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	i := firstAfter(c.ooms, oomSeq)
	c.replay = append(c.replay, c.ooms[:i]...)
	c.ooms = slices.Delete(c.ooms, 0, i)
	c.pruneReplay()
	j := firstAfter(c.events, eventSeq)
	c.events = slices.Delete(c.events, 0, j)
}

// pruneReplay drops replay events older than DefaultOOMReplay (by their
// kernel time) and the oldest past DefaultMaxReplayOOM. c.mu is held.
func (c *StreamClient) pruneReplay() {
	if over := len(c.replay) - DefaultMaxReplayOOM; over > 0 {
		c.replay = slices.Delete(c.replay, 0, over)
	}
	now := c.clk.ns(time.Now())
	keep := uint64(DefaultOOMReplay.Nanoseconds())
	i := 0
	for i < len(c.replay) && c.replay[i].GetKernelNs() != 0 && now > keep && c.replay[i].GetKernelNs() < now-keep {
		i++
	}
	c.replay = slices.Delete(c.replay, 0, i)
}

// flush sends what changed since the last flush on s: a snapshot when one
// is due, else the changed containers; then the OOM events and container
// events not yet sent on s. A new stream first gets the acknowledged OOM
// events kept for replay: a leader that saw them acknowledges them again
// without counting them twice, a new leader counts them.
func (c *StreamClient) flush(s *conn) error {
	c.mu.Lock()
	snapshot := c.resync
	c.resync = false
	var samples []Sample
	var gone []uint32
	if snapshot {
		samples = make([]Sample, 0, len(c.latest))
		for _, v := range c.latest {
			samples = append(samples, v)
		}
		clear(c.removed)
	} else {
		samples = make([]Sample, 0, len(c.dirty))
		for k := range c.dirty {
			samples = append(samples, c.latest[k])
		}
		for k := range c.removed {
			if e, ok := s.index[k]; ok {
				gone = append(gone, e.idx)
				delete(s.index, k)
			}
		}
		clear(c.removed)
	}
	clear(c.dirty)
	var ooms []*streamv1.OOMEvent
	if !s.replayed {
		s.replayed = true
		ooms = append(ooms, c.replay...)
	}
	i := firstAfter(c.ooms, s.sentSeq)
	ooms = append(ooms, c.ooms[i:]...)
	j := firstAfter(c.events, s.sentEvSeq)
	events := slices.Clone(c.events[j:])
	c.mu.Unlock()

	if snapshot {
		s.index, s.next = map[ContainerKey]*indexed{}, 0
	}
	first := true
	for len(samples) > 0 || len(gone) > 0 || (snapshot && first) {
		n := min(len(samples), maxCountersPerMessage)
		msg := c.counters(s, samples[:n], gone, snapshot && first)
		if err := s.st.Send(&streamv1.AgentMessage{Body: &streamv1.AgentMessage_Counters{Counters: msg}}); err != nil {
			return fmt.Errorf("send counters: %w", err)
		}
		c.sent.Add(float64(n))
		samples, gone, first = samples[n:], nil, false
	}
	for _, ev := range ooms {
		if err := s.st.Send(&streamv1.AgentMessage{Body: &streamv1.AgentMessage_OomEvent{OomEvent: ev}}); err != nil {
			return fmt.Errorf("send OOM event %d: %w", ev.GetSeq(), err)
		}
		s.sentSeq = ev.GetSeq()
	}
	for _, ev := range events {
		if err := s.st.Send(&streamv1.AgentMessage{Body: &streamv1.AgentMessage_ContainerEvent{ContainerEvent: ev}}); err != nil {
			return fmt.Errorf("send container event %d: %w", ev.GetSeq(), err)
		}
		s.sentEvSeq = ev.GetSeq()
	}
	return nil
}

// counters encodes samples for stream s (the protocol's rules, see
// streamv1.Counters): a container new on the stream, or whose counters went
// back (a restart), gets a new index with its identity and absolute values;
// the others get their index and increments.
func (c *StreamClient) counters(s *conn, samples []Sample, gone []uint32, snapshot bool) *streamv1.Counters {
	msg := &streamv1.Counters{Gone: gone, Snapshot: snapshot}
	if len(samples) == 0 {
		return msg
	}
	nss := make([]uint64, len(samples))
	base := uint64(0)
	for i, smp := range samples {
		ns := c.clk.ns(smp.At)
		if e, ok := s.index[smp.Key]; ok && ns < e.ns {
			ns = e.ns // the leader refuses time going back on one index
		}
		nss[i] = ns
		if i == 0 || ns < base {
			base = ns
		}
	}
	msg.KernelNs = base
	msg.Containers = make([]*streamv1.ContainerCounters, 0, len(samples))
	for i, smp := range samples {
		cc := &streamv1.ContainerCounters{KernelNsDelta: nss[i] - base}
		e, ok := s.index[smp.Key]
		restarted := ok && (smp.Periods < e.last.Periods || smp.Throttled < e.last.Throttled || smp.ThrottledTime < e.last.ThrottledTime)
		if restarted {
			msg.Gone = append(msg.Gone, e.idx)
		}
		if !ok || restarted {
			e = &indexed{idx: s.next}
			s.next++
			s.index[smp.Key] = e
			cc.Index, cc.PodUid, cc.Container = e.idx, smp.Key.PodUID, smp.Key.Name
			cc.Periods, cc.Throttled, cc.ThrottledNs = smp.Periods, smp.Throttled, uint64(max(smp.ThrottledTime, 0))
		} else {
			cc.Index = e.idx
			cc.Periods = smp.Periods - e.last.Periods
			cc.Throttled = smp.Throttled - e.last.Throttled
			cc.ThrottledNs = uint64(smp.ThrottledTime - e.last.ThrottledTime)
		}
		e.last, e.ns = smp, nss[i]
		msg.Containers = append(msg.Containers, cc)
	}
	return msg
}

// kernelClock turns the wall times of samples into CLOCK_MONOTONIC
// nanoseconds, the clock of the protocol's kernel_ns fields, through Go's
// monotonic reading of a time taken at start.
type kernelClock struct {
	at   time.Time
	mono uint64
}

func newKernelClock() (kernelClock, error) {
	var ts unix.Timespec
	at := time.Now()
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		return kernelClock{}, fmt.Errorf("read CLOCK_MONOTONIC: %w", err)
	}
	return kernelClock{at: at, mono: uint64(ts.Nano())}, nil
}

// ns returns t on CLOCK_MONOTONIC, never less than 1.
func (k kernelClock) ns(t time.Time) uint64 {
	d := t.Sub(k.at)
	if d < 0 && uint64(-d) >= k.mono {
		return 1
	}
	return uint64(int64(k.mono) + int64(d))
}
