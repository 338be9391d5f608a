package streamv1

import "time"

// Keepalive of the stream's connections (docs/design.md section 6): the
// agent pings the leader every KeepaliveTime and gives up after
// KeepaliveTimeout without an answer, so a leader that vanished without
// closing the connection (a node lost, a partition) is noticed in under a
// minute rather than after the kernel's TCP timeout. The leader's
// enforcement policy allows pings that often and pings quiet agents itself.
const (
	// KeepaliveTime is how often the agent pings an open stream.
	KeepaliveTime = 30 * time.Second
	// KeepaliveTimeout is how long a ping may go unanswered before the
	// connection is closed.
	KeepaliveTimeout = 10 * time.Second
)

// Limits on what one message may carry, which the agent stays within and
// the leader enforces (a message past them closes the stream with
// InvalidArgument or ResourceExhausted).
const (
	// MaxOOMCount is the largest OOMEvent.count the leader accepts; the
	// agent splits a larger count into several events.
	MaxOOMCount = 1000
	// MaxMessageBytes is the largest message the leader receives unless
	// configured otherwise; the agent bounds its Counters messages to stay
	// well under it.
	MaxMessageBytes = 4 << 20
	// MaxContainerNameBytes is the longest container name the leader
	// accepts: a Kubernetes container name is a DNS label (63 bytes).
	MaxContainerNameBytes = 63
	// MaxPodUIDBytes is the longest pod UID the leader accepts (a UID is
	// 36 bytes).
	MaxPodUIDBytes = 128
	// MaxCSRBytes is the longest Hello.metrics_csr the leader reads (an
	// ECDSA P-256 request is under 300 bytes).
	MaxCSRBytes = 4 << 10
)
