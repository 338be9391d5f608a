package stream

import (
	"crypto/tls"
	"net"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kerf-dev/kerf/node/oom"
	"github.com/kerf-dev/kerf/node/report"
)

func TestStreamClientAgainstTheLeader(t *testing.T) {
	f := newLeaderFixture(t)
	app := string(f.app)
	key := report.ContainerKey{PodUID: app, Name: "app"}

	t.Run("CountersArriveWithTheirValues", func(t *testing.T) {
		l := f.start(t, "127.0.0.1:0")
		c := f.client(t, l.addr, 0)
		c.Counters([]report.Sample{{Key: key, At: time.Now(), Periods: 100, Throttled: 10, ThrottledTime: time.Second}})
		require.Eventually(t, func() bool {
			s, ok := latestSample(l.memory, f.app)
			return ok && s.Periods == 100 && s.Throttled == 10
		}, eventually, tick)
		assert.Equal(t, Connected, c.State())

		// A later pass is sent as increments; the leader adds them up.
		c.Counters([]report.Sample{{Key: key, At: time.Now(), Periods: 150, Throttled: 25, ThrottledTime: 2 * time.Second}})
		require.Eventually(t, func() bool {
			s, ok := latestSample(l.memory, f.app)
			return ok && s.Periods == 150 && s.Throttled == 25
		}, eventually, tick)
		assert.Equal(t, 2.0, testutil.ToFloat64(c.sent))

		// Counters going back mean a restarted container: a new index
		// with absolute values, not a (refused) negative increment.
		c.Counters([]report.Sample{{Key: key, At: time.Now(), Periods: 5, Throttled: 1}})
		require.Eventually(t, func() bool {
			s, ok := latestSample(l.memory, f.app)
			return ok && s.Periods == 5 && s.Throttled == 1
		}, eventually, tick)
		assert.Equal(t, Connected, c.State(), "the leader kept the stream open")
	})

	t.Run("OOMKillArrivesOnceAndIsAcknowledged", func(t *testing.T) {
		l := f.start(t, "127.0.0.1:0")
		c := f.client(t, l.addr, 0)
		c.OOM(oom.Kill{Source: "cgroup", KernelNS: monoNow(t), PID: 42, Comm: "app", Count: 1}, app, "app")
		require.Eventually(t, func() bool { return c.bufferedOOM() == 0 }, eventually, tick, "the ack empties the buffer")
		assert.Equal(t, 1, kills(l.memory, f.app, "app"))
		time.Sleep(200 * time.Millisecond)
		assert.Equal(t, 1, kills(l.memory, f.app, "app"), "the kill is not sent again")
	})

	t.Run("BuffersWhileTheLeaderIsDownAndDrainsOnReconnect", func(t *testing.T) {
		l := f.start(t, "127.0.0.1:0")
		c := f.client(t, l.addr, 0)
		c.Counters([]report.Sample{{Key: key, At: time.Now(), Periods: 100, Throttled: 10}})
		require.Eventually(t, func() bool { _, ok := latestSample(l.memory, f.app); return ok }, eventually, tick)

		l.grpc.Stop()
		require.Eventually(t, func() bool { return c.State() != Connected }, eventually, tick)
		c.Counters([]report.Sample{{Key: key, At: time.Now(), Periods: 200, Throttled: 20}})
		c.OOM(oom.Kill{Source: "cgroup", Count: 1}, app, "app")
		c.Counters([]report.Sample{{Key: key, At: time.Now(), Periods: 300, Throttled: 30}})
		time.Sleep(300 * time.Millisecond) // a few failed reconnects
		assert.Equal(t, 1, c.bufferedOOM(), "the OOM event is kept")

		l2 := f.start(t, l.addr)
		require.Eventually(t, func() bool { return c.bufferedOOM() == 0 }, eventually, tick)
		assert.Equal(t, 1, kills(l2.memory, f.app, "app"))
		require.Eventually(t, func() bool {
			s, ok := latestSample(l2.memory, f.app)
			return ok && s.Periods == 300 && s.Throttled == 30
		}, eventually, tick)
		now := time.Now()
		ss, err := l2.memory.Samples([]types.UID{f.app}, now.Add(-time.Hour), now.Add(time.Hour))
		require.NoError(t, err)
		assert.Len(t, ss, 1, "the newest counters won: only they were sent")
		assert.Equal(t, Connected, c.State())
	})

	t.Run("BufferKeepsTheNewestOOMEventsAndCountsDrops", func(t *testing.T) {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		addr := lis.Addr().String()
		require.NoError(t, lis.Close())

		c := f.client(t, addr, 3)
		containers := []string{"c1", "c2", "c3", "c4", "c5"}
		for _, name := range containers {
			c.OOM(oom.Kill{Source: "cgroup", Count: 1}, app, name)
		}
		assert.Equal(t, 3, c.bufferedOOM())
		assert.Equal(t, 2.0, testutil.ToFloat64(c.ooms.drops))

		l := f.start(t, addr)
		require.Eventually(t, func() bool { return c.bufferedOOM() == 0 }, eventually, tick)
		for i, name := range containers {
			want := 0
			if i >= 2 {
				want = 1
			}
			assert.Equal(t, want, kills(l.memory, f.app, name), name)
		}
	})
}

func TestStreamClientConfigNamesTheBadField(t *testing.T) {
	good := Config{Addr: "127.0.0.1:1", TLS: &tls.Config{MinVersion: tls.VersionTLS13}, TokenFile: "/token", NodeName: "node-a"}
	tests := []struct {
		name  string
		edit  func(*Config)
		field string
	}{
		{"NoAddr", func(c *Config) { c.Addr = "" }, "Addr"},
		{"NoTLS", func(c *Config) { c.TLS = nil }, "TLS"},
		{"NoToken", func(c *Config) { c.TokenFile = "" }, "TokenFile"},
		{"NoNode", func(c *Config) { c.NodeName = "" }, "NodeName"},
		{"BadOOMSource", func(c *Config) { c.OOMSource = "dmesg" }, "OOMSource"},
		{"BackoffInverted", func(c *Config) { c.MinBackoff, c.MaxBackoff = time.Second, time.Millisecond }, "MaxBackoff"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := good
			tt.edit(&cfg)
			_, err := NewClient(cfg)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.field)
		})
	}
	c, err := NewClient(good)
	require.NoError(t, err)
	assert.Equal(t, Disconnected, c.State())
}
