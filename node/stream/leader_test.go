package stream

import (
	"context"
	"crypto/tls"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/kerf-dev/kerf/cluster/healthwatch"
	"github.com/kerf-dev/kerf/cluster/signals"
	clusterstream "github.com/kerf-dev/kerf/cluster/stream"
	"github.com/kerf-dev/kerf/node/oom"
	"github.com/kerf-dev/kerf/test/controlplane"
	"github.com/kerf-dev/kerf/test/leadertest"
	"github.com/kerf-dev/kerf/test/streamtest"
)

const streamTestNamespace = "kerf-system"

// leaderFixture is what the leader's stream servers of a test share: a
// real apiserver with the agent's service account, an agent pod and an app
// pod on node-a, the agent's bound token in a file, and a TLS identity.
type leaderFixture struct {
	cs        kubernetes.Interface
	pods      clusterstream.Pods
	serverTLS *tls.Config
	clientTLS *tls.Config
	tokenFile string
	app       types.UID
	// stops stop the clients, in the order started.
	stops []func()
}

func newLeaderFixture(t *testing.T) *leaderFixture {
	t.Helper()
	cp := controlplane.StartForTest(t)
	cs := cp.Clientset
	ctx := t.Context()
	_, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: streamTestNamespace}}, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = cs.CoreV1().ServiceAccounts(streamTestNamespace).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "kerf-agent"}}, metav1.CreateOptions{})
	require.NoError(t, err)
	agent := streamtest.CreatePod(t, cs, streamTestNamespace, "kerf-agent-a", "node-a", "kerf-agent")
	// c1-c5 for the tests that tell OOM events apart by container.
	app := streamtest.CreatePod(t, cs, streamTestNamespace, "app-a", "node-a", "", "app", "c1", "c2", "c3", "c4", "c5")

	token := streamtest.CreateToken(t, cs, streamTestNamespace, "kerf-agent", "kerf-leader", agent)
	tokenFile := filepath.Join(t.TempDir(), "token")
	require.NoError(t, os.WriteFile(tokenFile, []byte(token), 0o600))

	pods := leadertest.Pods(t, cp)

	serverTLS, pool := streamtest.SelfSigned(t)
	return &leaderFixture{
		cs:        cs,
		pods:      pods,
		serverTLS: serverTLS,
		clientTLS: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS13},
		tokenFile: tokenFile,
		app:       app.UID,
	}
}

// leader is one running leader stream server.
type leader struct {
	memory   *signals.Kernel
	statuses *signals.AgentStatuses
	usage    *signals.Usage
	grpc     *grpc.Server
	addr     string
	reg      *prometheus.Registry
}

// resent returns the leader's kerf_stream_oom_events_resent_total.
func (l *leader) resent(t *testing.T) float64 {
	t.Helper()
	return l.counter(t, "kerf_stream_oom_events_resent_total", "")
}

// counter returns the value of a leader's counter, of the series whose
// only label has value label ("" for a counter without labels); 0 when
// absent.
func (l *leader) counter(t *testing.T, name, label string) float64 {
	t.Helper()
	mfs, err := l.reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if len(m.GetLabel()) == 0 && label == "" || len(m.GetLabel()) == 1 && m.GetLabel()[0].GetValue() == label {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// gauge returns the value of a leader's gauge without labels; 0 when
// absent.
func (l *leader) gauge(t *testing.T, name string) float64 {
	t.Helper()
	mfs, err := l.reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	return 0
}

// start runs a leader's stream server with a new MemorySource on addr
// ("127.0.0.1:0" for any port).
func (f *leaderFixture) start(t *testing.T, addr string) *leader {
	t.Helper()
	return f.startReplica(t, addr, func() bool { return true })
}

// startReplica runs a leader replica's stream server that serves while
// leading says so, as kerf-leader does with its Lease.
func (f *leaderFixture) startReplica(t *testing.T, addr string, leading func() bool) *leader {
	t.Helper()
	memory := signals.NewKernel(signals.WithCompaction(signals.DefaultRecent))
	statuses := signals.NewAgentStatuses(0)
	usage := signals.NewUsage(0)
	reg := prometheus.NewRegistry()
	srv, err := clusterstream.New(clusterstream.Config{
		Audience:                "kerf-leader",
		ServiceAccountNamespace: streamTestNamespace,
		ServiceAccountName:      "kerf-agent",
		Clientset:               f.cs,
		Pods:                    f.pods,
		Kernel:                  memory,
		Statuses:                statuses,
		Usage:                   usage,
		Leading:                 leading,
		Registerer:              reg,
		Log:                     slog.New(slog.NewTextHandler(streamtest.LogWriter(t), nil)),
	})
	require.NoError(t, err)
	g := clusterstream.NewGRPCServer(srv, f.serverTLS)
	lis, err := net.Listen("tcp", addr)
	require.NoError(t, err)
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)
	return &leader{memory: memory, statuses: statuses, usage: usage, grpc: g, addr: lis.Addr().String(), reg: reg}
}

// client returns a running stream client for addr; it stops with t.
func (f *leaderFixture) client(t *testing.T, addr string, maxOOM int) *Client {
	t.Helper()
	c, err := NewClient(Config{
		Addr:           addr,
		TLS:            f.clientTLS,
		TokenFile:      f.tokenFile,
		NodeName:       "node-a",
		OOMSource:      oom.KindCgroup,
		MaxBufferedOOM: maxOOM,
		MinBackoff:     50 * time.Millisecond,
		MaxBackoff:     200 * time.Millisecond,
		Registerer:     prometheus.NewRegistry(),
		Log:            slog.New(slog.NewTextHandler(streamtest.LogWriter(t), nil)),
	})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { _ = c.Run(ctx); close(done) }()
	t.Cleanup(func() { <-done })
	f.stops = append(f.stops, func() { cancel(); <-done })
	return c
}

// latestSample returns the newest sample of the app container, and false
// when there is none.
func latestSample(m *signals.Kernel, pod types.UID) (healthwatch.CounterSample, bool) {
	now := time.Now()
	ss, _ := m.Samples([]types.UID{pod}, now.Add(-time.Hour), now.Add(time.Hour))
	if len(ss) == 0 {
		return healthwatch.CounterSample{}, false
	}
	return ss[len(ss)-1], true
}

func kills(m *signals.Kernel, pod types.UID, container string) int {
	now := time.Now()
	n, _ := m.OOMKills(pod, container, now.Add(-time.Hour), now.Add(time.Hour))
	return n
}

// monoNow returns CLOCK_MONOTONIC, the clock of kernel timestamps.
func monoNow(t *testing.T) uint64 {
	var ts unix.Timespec
	require.NoError(t, unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts))
	return uint64(ts.Nano())
}

const (
	eventually = 10 * time.Second
	tick       = 20 * time.Millisecond
)

// forwarder is the leader Service of the cluster, on loopback: it forwards
// each new connection to the ready (leading) replica's stream port, as the
// Service's endpoints follow the replicas' readiness; connections already
// open stay where they are.
type forwarder struct {
	addr   string
	target atomic.Pointer[string]
	mu     sync.Mutex
	conns  []net.Conn
}

// cut closes every forwarded connection.
func (f *forwarder) cut() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range f.conns {
		_ = c.Close()
	}
	f.conns = nil
}

func newForwarder(t *testing.T) *forwarder {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = lis.Close() })
	f := &forwarder{addr: lis.Addr().String()}
	go func() {
		for {
			in, err := lis.Accept()
			if err != nil {
				return
			}
			target := f.target.Load()
			if target == nil {
				_ = in.Close() // no ready endpoint: refused
				continue
			}
			out, err := net.Dial("tcp", *target)
			if err != nil {
				_ = in.Close()
				continue
			}
			f.mu.Lock()
			f.conns = append(f.conns, in, out)
			f.mu.Unlock()
			go func() { _, _ = io.Copy(out, in); _ = out.Close() }()
			go func() { _, _ = io.Copy(in, out); _ = in.Close() }()
		}
	}()
	return f
}

func (f *forwarder) routeTo(addr string) { f.target.Store(&addr) }
func (f *forwarder) noEndpoint()         { f.target.Store(nil) }
