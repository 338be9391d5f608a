package scale

import (
	"context"
	"crypto/x509"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kerf-dev/kerf/test/authtest"
	"github.com/kerf-dev/kerf/test/controlplane"
	"github.com/kerf-dev/kerf/test/freeport"
)

// benchCluster is a benchmark's control plane, populated, with what the
// leader and the simulated agents need to run on it.
type benchCluster struct {
	// ctx ends as the benchmark does, before the control plane stops.
	ctx context.Context
	c   client.WithWatch
	cs  kubernetes.Interface
	s   *sim
	// args start the leader; tokens and caPool connect the agents.
	args   leaderArgs
	tokens []string
	caPool *x509.CertPool
}

// newBenchCluster starts the control plane and populates it with n
// workloads on m nodes, workers at a time, then calls populated (a
// benchmark's own objects and watches, nil for none). It makes the
// leader's and the agents' identities, the stream's certificate and a
// reader of the leader's metrics, and keeps the leader's logs.
func newBenchCluster(b *testing.B, n, m, workers int, populated func(context.Context, client.WithWatch, *sim)) *benchCluster {
	cp := controlplane.StartForTest(b)
	c, cs := fastClient(b, cp.Config)
	dir := b.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	b.Cleanup(cancel)
	keepLeaderLogs(b, dir)

	s := &sim{n: n, m: m}
	leaderKubeconfig := identities(b, c, cs, cp.Config, dir)
	populate(b, c, s, workers)
	if populated != nil {
		populated(ctx, c, s)
	}
	bc := &benchCluster{ctx: ctx, c: c, cs: cs, s: s,
		tokens: agentTokens(b, c, cs, s, dir, workers), caPool: streamCert(b, dir)}
	authtest.InstallReaderRoles(b, cp)
	metricsCaller := authtest.NewCaller(b, cp, kerfNS, "scale-metrics-reader")
	metricsCaller.BindCluster(b, cp, authtest.MetricsReader)
	bc.args = leaderArgs{bin: buildLeader(b, dir), kubeconfig: leaderKubeconfig, streamAddr: freeport.Addr(b), certDir: dir, dir: dir,
		metricsToken: metricsCaller.Token}
	return bc
}

// start starts the leader as identity, samples its usage, connects an
// agent per node and has them send their counters every sampleEvery
// until bc.ctx ends.
func (bc *benchCluster) start(b *testing.B, identity string, sampleEvery time.Duration) (*leaderProc, *usage, *agents) {
	leader := startLeader(b, bc.args, identity)
	u := sampleUsage(bc.ctx, leader)
	ag := startAgents(b, bc.s, bc.args.streamAddr, bc.caPool, bc.tokens)
	tConnect := ag.waitConnected(b, leader, 10*time.Minute)
	b.Logf("leader start → %d agents connected: %v", bc.s.m, tConnect.Round(time.Millisecond))
	go sendCounters(bc.ctx, bc.s, ag, sampleEvery)
	return leader, u, ag
}
