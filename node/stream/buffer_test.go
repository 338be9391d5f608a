package stream

import (
	"crypto/tls"
	"log/slog"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	streamv1 "github.com/kerf-dev/kerf/api/stream/v1"
	"github.com/kerf-dev/kerf/node/oom"
	"github.com/kerf-dev/kerf/node/report"
)

// offlineClient returns a client that is never run: what it records stays
// in its buffers.
func offlineClient(t *testing.T, cfg Config) *Client {
	t.Helper()
	cfg.Addr, cfg.TLS, cfg.TokenFile, cfg.NodeName = "127.0.0.1:1", &tls.Config{MinVersion: tls.VersionTLS13}, "/token", "node-a"
	cfg.Log = slog.New(slog.DiscardHandler)
	c, err := NewClient(cfg)
	require.NoError(t, err)
	return c
}

func seqs[T seqd](buf []T) []uint64 {
	out := make([]uint64, len(buf))
	for i, m := range buf {
		out[i] = m.GetSeq()
	}
	return out
}

func TestOOMCountAboveTheWireLimitIsSplit(t *testing.T) {
	c := offlineClient(t, Config{})
	c.OOM(oom.Kill{Count: 2*streamv1.MaxOOMCount + 500}, "uid", "app")
	require.Len(t, c.ooms.items, 3)
	assert.Equal(t, []uint64{1, 2, 3}, seqs(c.ooms.items))
	for i, want := range []uint64{streamv1.MaxOOMCount, streamv1.MaxOOMCount, 500} {
		assert.Equal(t, want, c.ooms.items[i].GetCount())
	}
	c.OOM(oom.Kill{}, "uid", "app")
	assert.Equal(t, uint64(1), c.ooms.items[3].GetCount(), "a kill without a count is one kill")
}

func TestAckKeepsTheAcknowledgedOOMEventsForReplay(t *testing.T) {
	c := offlineClient(t, Config{})
	for range 3 {
		c.OOM(oom.Kill{Count: 1}, "uid", "app")
	}
	for range 2 {
		c.ContainerEvent(report.ContainerEvent{PodUID: "uid", Container: "app", RestartCount: 1})
	}
	c.ack(2, 1)
	assert.Equal(t, []uint64{3}, seqs(c.ooms.items))
	assert.Equal(t, []uint64{1, 2}, seqs(c.replay), "acknowledged OOM events are replayed to new streams")
	assert.Equal(t, []uint64{2}, seqs(c.events.items))
	assert.Equal(t, 1, c.bufferedOOM())
	assert.Equal(t, 1, c.bufferedEvents())

	c.ack(2, 1)
	assert.Equal(t, []uint64{1, 2}, seqs(c.replay), "an ack again changes nothing")
	assert.Equal(t, []uint64{3}, seqs(c.ooms.appendAfter(nil, 2)))
	assert.Empty(t, c.ooms.appendAfter(nil, 3))
}

func TestBuffersDropTheOldestPastTheirLimit(t *testing.T) {
	c := offlineClient(t, Config{MaxBufferedOOM: 2, MaxBufferedEvents: 3})
	for range 5 {
		c.OOM(oom.Kill{Count: 1}, "uid", "app")
		c.ContainerEvent(report.ContainerEvent{PodUID: "uid", Container: "app"})
	}
	assert.Equal(t, []uint64{4, 5}, seqs(c.ooms.items))
	assert.Equal(t, []uint64{3, 4, 5}, seqs(c.events.items))
	assert.Equal(t, 3.0, testutil.ToFloat64(c.ooms.drops))
	assert.Equal(t, 2.0, testutil.ToFloat64(c.events.drops))
}
