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

	t.Run("UsageArrivesInTheLeadersStore", func(t *testing.T) {
		l := f.start(t, "127.0.0.1:0")
		c := f.client(t, l.addr, 0)
		usage := func(at time.Time, periods uint64, cpu time.Duration, ws, peak uint64) []report.Sample {
			return []report.Sample{{Key: key, At: at, Periods: periods, HasUsage: true,
				Usage: report.Usage{CPU: cpu, WorkingSet: ws, Peak: peak}}}
		}
		latest := func(cpu time.Duration, ws, peak uint64) func() bool {
			return func() bool {
				u, ok := l.usage.Latest(f.app, "app")
				return ok && u.CPU == cpu && u.WorkingSet == ws && u.Peak == peak
			}
		}
		c.Counters(usage(time.Now(), 100, 2*time.Second, 100<<20, 300<<20))
		require.Eventually(t, latest(2*time.Second, 100<<20, 300<<20), eventually, tick)
		// A pass without usage leaves the leader's usage as it was; the next
		// usage arrives as increments, memory down as well as up.
		c.Counters([]report.Sample{{Key: key, At: time.Now(), Periods: 110}})
		require.Eventually(t, func() bool { s, ok := latestSample(l.memory, f.app); return ok && s.Periods == 110 }, eventually, tick)
		c.Counters(usage(time.Now(), 120, 3*time.Second, 80<<20, 120<<20))
		require.Eventually(t, latest(3*time.Second, 80<<20, 120<<20), eventually, tick)
		assert.Len(t, l.usage.Since(f.app, "app", time.Time{}, nil), 2)
		assert.Equal(t, Connected, c.State())
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

func TestClientKeepsUnsentUsage(t *testing.T) {
	c, err := NewClient(Config{Addr: "127.0.0.1:1", TLS: &tls.Config{}, TokenFile: "token", NodeName: "node-a"})
	require.NoError(t, err)
	key := report.ContainerKey{PodUID: "uid", Name: "app"}
	at := time.Now()
	u := func(cpu time.Duration, peak uint64) report.Usage {
		return report.Usage{CPU: cpu, WorkingSet: 10 << 20, Peak: peak}
	}
	c.Counters([]report.Sample{{Key: key, At: at, Periods: 10, HasUsage: true, Usage: u(time.Second, 300<<20)}})
	// The leader is unreachable: a pass without usage keeps the unsent one.
	c.Counters([]report.Sample{{Key: key, At: at.Add(time.Second), Periods: 20}})
	got := c.latest[key]
	assert.Equal(t, uint64(20), got.Periods)
	assert.True(t, got.HasUsage)
	assert.Equal(t, u(time.Second, 300<<20), got.Usage)
	// A newer usage replaces it, keeping the higher peak of the two.
	c.Counters([]report.Sample{{Key: key, At: at.Add(10 * time.Second), Periods: 30, HasUsage: true, Usage: u(2*time.Second, 100<<20)}})
	assert.Equal(t, u(2*time.Second, 300<<20), c.latest[key].Usage)
	// Once sent, nothing is folded into the next.
	clear(c.dirty)
	c.Counters([]report.Sample{{Key: key, At: at.Add(20 * time.Second), Periods: 40, HasUsage: true, Usage: u(3*time.Second, 50<<20)}})
	assert.Equal(t, u(3*time.Second, 50<<20), c.latest[key].Usage)
	// A restarted container's counters start again: the old usage is not
	// carried over.
	c.Counters([]report.Sample{{Key: key, At: at.Add(21 * time.Second), Periods: 1}})
	assert.False(t, c.latest[key].HasUsage)
}
