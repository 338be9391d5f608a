package stream

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"

	streamv1 "github.com/kerf-dev/kerf/api/stream/v1"
	"github.com/kerf-dev/kerf/node/report"
)

// agentStream is the agent's side of one Connect call.
type agentStream = grpc.BidiStreamingClient[streamv1.AgentMessage, streamv1.LeaderMessage]

// conn is one stream's state: its container index and the highest OOM and
// container event seqs sent on it.
type conn struct {
	st      agentStream
	index   index
	sentSeq uint64
	// replayed is set once the replay events went out on this stream.
	replayed  bool
	sentEvSeq uint64
}

// connect opens one stream and serves it until it fails or ctx ends.
func (c *Client) connect(ctx context.Context) error {
	c.setState(Connecting)
	token, err := os.ReadFile(c.cfg.TokenFile)
	if err != nil {
		return fmt.Errorf("read token: %w", err)
	}
	tlsConfig, err := c.tlsConfig()
	if err != nil {
		return err
	}
	opts := []grpc.DialOption{
		grpc.WithTransportCredentials(credentials.NewTLS(tlsConfig)),
		// Within the leader's enforcement policy: a leader gone without
		// closing the connection is noticed in under a minute.
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: streamv1.KeepaliveTime, Timeout: streamv1.KeepaliveTimeout}),
	}
	if c.cfg.Dial != nil {
		opts = append(opts, grpc.WithContextDialer(c.cfg.Dial))
	}
	cc, err := grpc.NewClient(c.cfg.Addr, opts...)
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
		MetricsCsr:      c.cfg.MetricsCSR,
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
	c.setState(Connected)
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

// tlsConfig returns the TLS config of a new connection: Config.TLS,
// trusting the CAs of Config.CAFile as it is now when one is set.
func (c *Client) tlsConfig() (*tls.Config, error) {
	if c.cfg.CAFile == "" {
		return c.cfg.TLS, nil
	}
	pem, err := os.ReadFile(c.cfg.CAFile)
	if err != nil {
		return nil, fmt.Errorf("read leader CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("leader CA %s: no PEM certificate in it", c.cfg.CAFile)
	}
	if sum := sha256.Sum256(pem); sum != c.caSum {
		if c.caSum != [sha256.Size]byte{} {
			c.log.Info("leader CA changed, trusting the new one", "file", c.cfg.CAFile)
		}
		c.caSum = sum
	}
	cfg := c.cfg.TLS.Clone()
	cfg.RootCAs = pool
	return cfg, nil
}

// recvCause returns the stream's status after a failed Send, when no
// other goroutine receives: gRPC reports the reason only through Recv.
func recvCause(st agentStream, err error) error {
	if !errors.Is(err, io.EOF) {
		return err
	}
	if _, rerr := st.Recv(); rerr != nil {
		return fmt.Errorf("%w (stream: %w)", err, rerr)
	}
	return err
}

// receive handles the leader's messages until the stream ends.
func (c *Client) receive(st agentStream) error {
	for {
		msg, err := st.Recv()
		if err != nil {
			return fmt.Errorf("receive: %w", err)
		}
		switch b := msg.GetBody().(type) {
		case *streamv1.LeaderMessage_Ack:
			c.ack(b.Ack.GetOomSeq(), b.Ack.GetEventSeq())
		case *streamv1.LeaderMessage_MetricsCertificate:
			if c.cfg.OnMetricsCertificate != nil {
				c.cfg.OnMetricsCertificate(b.MetricsCertificate.GetCertificatePem())
			}
		case *streamv1.LeaderMessage_Resync:
			c.log.Info("leader asked for a snapshot", "reason", b.Resync.GetReason())
			c.mu.Lock()
			c.resync = true
			c.mu.Unlock()
			c.notify()
		}
	}
}

// flush sends what changed since the last flush on s: a snapshot when one
// is due, else the changed containers; then the OOM events and container
// events not yet sent on s. A new stream first gets the acknowledged OOM
// events kept for replay: a leader that saw them acknowledges them again
// without counting them twice, a new leader counts them.
func (c *Client) flush(s *conn) error {
	c.mu.Lock()
	snapshot := c.resync
	c.resync = false
	var samples []report.Sample
	var gone []uint32
	if snapshot {
		samples = make([]report.Sample, 0, len(c.latest))
		for _, v := range c.latest {
			samples = append(samples, v)
		}
		clear(c.removed)
	} else {
		samples = make([]report.Sample, 0, len(c.dirty))
		for k := range c.dirty {
			samples = append(samples, c.latest[k])
		}
		for k := range c.removed {
			if idx, ok := s.index.forget(k); ok {
				gone = append(gone, idx)
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
	ooms = c.ooms.appendAfter(ooms, s.sentSeq)
	events := c.events.appendAfter(nil, s.sentEvSeq)
	c.mu.Unlock()

	if snapshot {
		s.index.reset()
	}
	first := true
	for len(samples) > 0 || len(gone) > 0 || (snapshot && first) {
		n := min(len(samples), maxCountersPerMessage)
		msg := s.index.encode(c.clk, samples[:n], gone, snapshot && first)
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
