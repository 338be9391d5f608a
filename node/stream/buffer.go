package stream

import (
	"cmp"
	"log/slog"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	streamv1 "github.com/kerf-dev/kerf/api/stream/v1"
	"github.com/kerf-dev/kerf/node/oom"
	"github.com/kerf-dev/kerf/node/report"
)

// seqd is a buffered message: OOM events and container events, by seq.
type seqd interface{ GetSeq() uint64 }

// buffer keeps messages until the leader acknowledges them: numbered from
// 1 by seq, at most limit of them, the oldest dropped and counted past it.
// Its Client's mu guards it.
type buffer[T seqd] struct {
	// what names the messages in the log: "OOM event", "container event".
	what  string
	limit int
	drops prometheus.Counter
	// seq is the seq of the newest message pushed.
	seq uint64
	// items are the unacknowledged messages, by seq.
	items []T
}

// nextSeq returns the seq of the next message.
func (b *buffer[T]) nextSeq() uint64 {
	b.seq++
	return b.seq
}

// push appends msgs and keeps the newest limit messages, counting and
// logging the dropped ones.
func (b *buffer[T]) push(log *slog.Logger, msgs ...T) {
	b.items = append(b.items, msgs...)
	over := len(b.items) - b.limit
	if over <= 0 {
		return
	}
	b.drops.Add(float64(over))
	log.Warn(b.what+" buffer full, dropped the oldest", "dropped", over, "max", b.limit)
	b.items = slices.Delete(b.items, 0, over)
}

// ack removes the messages up to seq, appending them to acked first when
// acked is not nil.
func (b *buffer[T]) ack(seq uint64, acked *[]T) {
	i := firstAfter(b.items, seq)
	if acked != nil {
		*acked = append(*acked, b.items[:i]...)
	}
	b.items = slices.Delete(b.items, 0, i)
}

// appendAfter appends the messages whose seq is above seq to dst.
func (b *buffer[T]) appendAfter(dst []T, seq uint64) []T {
	return append(dst, b.items[firstAfter(b.items, seq):]...)
}

// firstAfter returns the index of the first message of buf (ordered by
// seq) whose seq is above seq.
func firstAfter[T seqd](buf []T, seq uint64) int {
	i, _ := slices.BinarySearchFunc(buf, seq+1, func(e T, s uint64) int { return cmp.Compare(e.GetSeq(), s) })
	return i
}

// OOM records an OOM kill of a container. It is kept until the leader
// acknowledges it; past MaxBufferedOOM unacknowledged events the oldest is
// dropped and counted. A count above streamv1.MaxOOMCount is split into
// several events.
func (c *Client) OOM(k oom.Kill, podUID, container string) {
	count := max(k.Count, 1)
	var evs []*streamv1.OOMEvent
	c.mu.Lock()
	for count > 0 {
		n := min(count, streamv1.MaxOOMCount)
		count -= n
		evs = append(evs, &streamv1.OOMEvent{
			Seq:       c.ooms.nextSeq(),
			PodUid:    podUID,
			Container: container,
			KernelNs:  k.KernelNS,
			Pid:       uint32(max(k.PID, 0)),
			Comm:      k.Comm,
			CgroupId:  k.CgroupID,
			Count:     n,
		})
	}
	c.ooms.push(c.log, evs...)
	c.mu.Unlock()
	c.notify()
}

// ContainerEvent records a container restart or termination that pod
// discovery saw, for the leader to act on before the apiserver has the pod
// status (docs/design.md section 3). It is kept until the leader
// acknowledges it; past MaxBufferedEvents unacknowledged events the oldest
// is dropped and counted.
func (c *Client) ContainerEvent(ev report.ContainerEvent) {
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
	msg.Seq = c.events.nextSeq()
	c.events.push(c.log, msg)
	c.mu.Unlock()
	c.notify()
}

// ack drops the OOM events up to oomSeq, keeping them for replay, and the
// container events up to eventSeq.
func (c *Client) ack(oomSeq, eventSeq uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ooms.ack(oomSeq, &c.replay)
	c.pruneReplay()
	c.events.ack(eventSeq, nil)
}

// pruneReplay drops replay events older than DefaultOOMReplay (by their
// kernel time) and the oldest past DefaultMaxReplayOOM. c.mu is held.
func (c *Client) pruneReplay() {
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

// bufferedOOM returns how many OOM events await an acknowledgement.
func (c *Client) bufferedOOM() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.ooms.items)
}

// bufferedEvents returns how many container events await an
// acknowledgement.
func (c *Client) bufferedEvents() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.events.items)
}
