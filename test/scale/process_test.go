package scale

// The leader as a measured child process (the real cmd/kerf-leader
// binary), its stream certificate, the simulated agents and the
// apiserver's own metrics.

import (
	"bufio"
	"cmp"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"k8s.io/client-go/kubernetes"

	"github.com/kerf-dev/kerf/internal/kube"
	"github.com/kerf-dev/kerf/node/report"
	agentstream "github.com/kerf-dev/kerf/node/stream"
	"github.com/kerf-dev/kerf/test/freeport"
)

// leaderBinEnv names a prebuilt kerf-leader to measure instead of the
// one buildLeader makes from this tree (to compare two builds).
const leaderBinEnv = "KERF_SCALE_LEADER_BIN"

// profileEnv names a directory: when set, the leader is built with
// -tags kerfpprof (it serves net/http/pprof, cmd/kerf-leader
// pprof_kerfpprof.go) and its heap profile at the idle point is written
// there as leader-heap-<workloads>.pb.gz (go tool pprof reads it). A
// KERF_SCALE_LEADER_BIN must then be a kerfpprof build too.
const profileEnv = "KERF_SCALE_PROFILE"

// memLimitEnv, when set, is the leader's GOMEMLIMIT (e.g. "512MiB", what
// the chart's default memory limit gives it, docs/leader.md "Memory"):
// the harness runs the leader as a process without a container, so with
// none the runtime's GOGC=100 alone decides its heap's growth.
const memLimitEnv = "KERF_SCALE_LEADER_GOMEMLIMIT"

// gcPercentEnv, when set, is the leader's GOGC (only the leader's: a GOGC
// of the harness's own environment would reach its process too).
const gcPercentEnv = "KERF_SCALE_LEADER_GOGC"

// leaderEnvEnv adds variables to every leader replica's environment,
// separated by spaces (e.g. "GODEBUG=gctrace=1": a line per GC in its
// log, the heap before and after it and its goal; only the leader's).
const leaderEnvEnv = "KERF_SCALE_LEADER_ENV"

// leaderFlagsEnv adds flags to every leader replica's command line
// (e.g. "--rollback-workers=0", to compare a setting side by side).
const leaderFlagsEnv = "KERF_SCALE_LEADER_FLAGS"

// buildLeader builds kerf-leader with hack/build.sh, as its image has it
// (with the kerfpprof tag when $KERF_SCALE_PROFILE is set), into dir and
// returns its path; or returns $KERF_SCALE_LEADER_BIN.
func buildLeader(tb testing.TB, dir string) string {
	tb.Helper()
	if bin := os.Getenv(leaderBinEnv); bin != "" {
		_, err := os.Stat(bin)
		require.NoError(tb, err, "%s", leaderBinEnv)
		return bin
	}
	repo, err := kube.RepoRoot()
	require.NoError(tb, err)
	cmd := exec.Command(filepath.Join(repo, "hack", "build.sh"), dir, "kerf-leader")
	cmd.Dir = repo
	cmd.Env = os.Environ()
	if os.Getenv(profileEnv) != "" {
		cmd.Env = append(cmd.Env, "KERF_BUILD_TAGS=kerfpprof")
	}
	out, err := cmd.CombinedOutput()
	require.NoError(tb, err, "hack/build.sh kerf-leader: %s", out)
	return filepath.Join(dir, "kerf-leader")
}

// streamCert writes a self-signed certificate for 127.0.0.1 as tls.crt and
// tls.key into dir (kerf-leader --stream-cert-dir) and returns a pool
// that trusts it.
func streamCert(tb testing.TB, dir string) *x509.CertPool {
	tb.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(tb, err)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "kerf-leader"},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(tb, err)
	keyDER, err := x509.MarshalECPrivateKey(key)
	require.NoError(tb, err)
	require.NoError(tb, os.WriteFile(filepath.Join(dir, "tls.crt"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600))
	require.NoError(tb, os.WriteFile(filepath.Join(dir, "tls.key"), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600))
	cert, err := x509.ParseCertificate(der)
	require.NoError(tb, err)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return pool
}

// leaderProc is a running kerf-leader.
type leaderProc struct {
	cmd     *exec.Cmd
	done    chan struct{}
	err     error
	logPath string
	started time.Time
	// pprofAddr is where a kerfpprof build serves /debug/pprof ("" when
	// $KERF_SCALE_PROFILE is unset).
	pprofAddr string
	// metricsAddr serves the leader's /metrics, read with metricsToken
	// (a caller bound to kerf-metrics-reader: the leader requires one).
	metricsAddr, metricsToken string
}

// leaderArgs are what startLeader passes to every replica.
type leaderArgs struct {
	bin, kubeconfig, streamAddr, certDir, dir string
	// metricsToken reads the replicas' /metrics.
	metricsToken string
}

// startLeader starts replica identity, its log (JSON, info) in dir.
func startLeader(tb testing.TB, a leaderArgs, identity string) *leaderProc {
	tb.Helper()
	logPath := filepath.Join(a.dir, identity+".log")
	logFile, err := os.Create(logPath)
	require.NoError(tb, err)
	metricsAddr := freeport.Addr(tb)
	cmd := exec.Command(a.bin,
		"--kubeconfig="+a.kubeconfig, "--namespace="+kerfNS, "--identity="+identity, "--lease-name=kerf-leader",
		"--metrics-addr="+metricsAddr, "--webhook-addr=",
		"--stream-addr="+a.streamAddr, "--stream-cert-dir="+a.certDir,
		"--agent-audience="+audience, "--agent-service-account="+agentSA)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	var pprofAddr string
	cmd.Env = os.Environ()
	if os.Getenv(profileEnv) != "" {
		pprofAddr = freeport.Addr(tb)
		cmd.Env = append(cmd.Env, "KERF_LEADER_PPROF_ADDR="+pprofAddr)
	}
	cmd.Args = append(cmd.Args, strings.Fields(os.Getenv(leaderFlagsEnv))...)
	if limit := os.Getenv(memLimitEnv); limit != "" {
		cmd.Env = append(cmd.Env, "GOMEMLIMIT="+limit)
	}
	if gc := os.Getenv(gcPercentEnv); gc != "" {
		cmd.Env = append(cmd.Env, "GOGC="+gc)
	}
	cmd.Env = append(cmd.Env, strings.Fields(os.Getenv(leaderEnvEnv))...)
	require.NoError(tb, cmd.Start())
	p := &leaderProc{cmd: cmd, done: make(chan struct{}), logPath: logPath, started: time.Now(), pprofAddr: pprofAddr, metricsAddr: metricsAddr, metricsToken: a.metricsToken}
	go func() { p.err = cmd.Wait(); _ = logFile.Close(); close(p.done) }()
	tb.Cleanup(func() { p.stop(tb) })
	return p
}

// stop sends SIGTERM and waits (a SIGKILL after 30 s).
func (p *leaderProc) stop(tb testing.TB) {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		tb.Logf("kerf-leader %d did not stop in 30s: SIGKILL", p.cmd.Process.Pid)
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// exited fails tb when the leader has exited, with its log's tail.
func (p *leaderProc) alive(tb testing.TB) {
	tb.Helper()
	select {
	case <-p.done:
		b, _ := os.ReadFile(p.logPath)
		tb.Fatalf("kerf-leader exited (%v); log tail:\n%s", p.err, tail(string(b), 3000))
	default:
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// clockTick is USER_HZ, the unit of /proc/<pid>/stat's times (100 on
// every Linux this runs on).
const clockTick = 100

// cpu is the leader's user+sys CPU time so far (/proc/<pid>/stat).
func (p *leaderProc) cpu() time.Duration { return pidCPU(p.cmd.Process.Pid) }

// pidCPU is process pid's user+sys CPU time so far (/proc/<pid>/stat), 0
// when it cannot be read.
func pidCPU(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	// After "pid (comm) ": state is field 3, utime 14, stime 15.
	ut, _ := strconv.ParseUint(f[11], 10, 64)
	st, _ := strconv.ParseUint(f[12], 10, 64)
	return time.Duration(ut+st) * time.Second / clockTick
}

// controlPlaneCPU is the user+sys CPU time so far of the processes named
// kube-apiserver and etcd (/proc/<pid>/comm), the control plane the
// leader shares this machine's cores with. A process of either name that
// is not the harness's (another test's) is counted too; the benchmark
// runs alone.
func controlPlaneCPU() map[string]time.Duration {
	out := map[string]time.Duration{}
	dirs, _ := os.ReadDir("/proc")
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
		if err != nil {
			continue
		}
		if name := strings.TrimSpace(string(comm)); name == "kube-apiserver" || name == "etcd" {
			out[name] += pidCPU(pid)
		}
	}
	return out
}

// memory is the leader's VmRSS and VmHWM (peak) in bytes.
func (p *leaderProc) memory() (rss, peak uint64) {
	m := p.status()
	return m.rss, m.hwm
}

// procMemory is what /proc/<pid>/status says of a process's memory, in
// bytes: its RSS and peak, and the RSS's parts. anon is what the process
// allocated (the Go runtime's, which GOMEMLIMIT counts, and any other);
// file is the mapped files' pages, the binary's, which the kernel can
// drop and read again.
type procMemory struct {
	rss, hwm, anon, file uint64
}

// status reads the leader's procMemory (zero once it has exited).
func (p *leaderProc) status() procMemory {
	var m procMemory
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		return m
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		kb, _ := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		switch k {
		case "VmRSS":
			m.rss = kb << 10
		case "VmHWM":
			m.hwm = kb << 10
		case "RssAnon":
			m.anon = kb << 10
		case "RssFile":
			m.file = kb << 10
		}
	}
	return m
}

// heapProfile writes the leader's heap profile into $KERF_SCALE_PROFILE
// as name, and logs where; it does nothing when $KERF_SCALE_PROFILE is
// unset. With gc, a GC runs first, so that it shows what is live now;
// without, it shows what was live at the last GC, and the leader runs
// undisturbed (the snapshots during the wave).
func (p *leaderProc) heapProfile(tb testing.TB, name string, gc bool) {
	tb.Helper()
	path, err := p.writeHeapProfile(name, gc)
	require.NoError(tb, err, "the leader's heap profile (is %s a kerfpprof build?)", leaderBinEnv)
	if path != "" {
		tb.Logf("the leader's heap profile: %s (go tool pprof -sample_index=inuse_space %s)", path, path)
	}
}

// writeHeapProfile writes the leader's heap profile into
// $KERF_SCALE_PROFILE as name and returns its path, "" when
// $KERF_SCALE_PROFILE is unset or the leader serves no profiles.
func (p *leaderProc) writeHeapProfile(name string, gc bool) (string, error) {
	dir := os.Getenv(profileEnv)
	if dir == "" || p.pprofAddr == "" {
		return "", nil
	}
	c := &http.Client{Timeout: time.Minute}
	url := "http://" + p.pprofAddr + "/debug/pprof/heap"
	if gc {
		url += "?gc=1"
	}
	resp, err := c.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	path := filepath.Join(dir, name)
	f, err := os.Create(path)
	if err != nil {
		return "", err
	}
	_, err = io.Copy(f, resp.Body)
	if err := errors.Join(err, f.Close()); err != nil {
		return "", fmt.Errorf("write %s: %w", path, err)
	}
	return path, nil
}

// cpuProfile records the leader's CPU profile for d, from now, into
// $KERF_SCALE_PROFILE as name, in the background; wait waits for it and
// logs where it went. It does nothing when $KERF_SCALE_PROFILE is unset.
func (p *leaderProc) cpuProfile(tb testing.TB, name string, d time.Duration) (wait func()) {
	dir := os.Getenv(profileEnv)
	if dir == "" || p.pprofAddr == "" {
		return func() {}
	}
	done := make(chan error, 1)
	path := filepath.Join(dir, name)
	go func() {
		c := &http.Client{Timeout: d + time.Minute}
		resp, err := c.Get(fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", p.pprofAddr, int(d.Seconds())))
		if err != nil {
			done <- err
			return
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			done <- fmt.Errorf("the leader's CPU profile: %s", resp.Status)
			return
		}
		f, err := os.Create(path)
		if err != nil {
			done <- err
			return
		}
		_, err = io.Copy(f, resp.Body)
		done <- errors.Join(err, f.Close())
	}()
	return func() {
		if err := <-done; err != nil {
			tb.Logf("the leader's CPU profile %s: %v", path, err)
			return
		}
		tb.Logf("the leader's CPU profile: %s (go tool pprof %s)", path, path)
	}
}

// keepLeaderLogs copies the leader replicas' logs from dir into
// $KERF_SCALE_PROFILE, when set, once the benchmark is done (dir, a
// TempDir, is removed after).
func keepLeaderLogs(tb testing.TB, dir string) {
	out := os.Getenv(profileEnv)
	if out == "" {
		return
	}
	tb.Cleanup(func() {
		logs, _ := filepath.Glob(filepath.Join(dir, "*.log"))
		for _, l := range logs {
			raw, err := os.ReadFile(l)
			if err == nil {
				err = os.WriteFile(filepath.Join(out, "leader-"+filepath.Base(l)), raw, 0o644)
			}
			if err != nil {
				tb.Logf("keep the leader's log %s: %v", l, err)
			}
		}
	})
}

// metric sums the leader's samples of metric name (any labels) from its
// /metrics.
func (p *leaderProc) metric(name string) (float64, error) {
	raw, err := p.scrape()
	if err != nil {
		return 0, err
	}
	return sumMetric(raw, name)
}

// goMemory logs where the leader's memory goes, from its Go collector's
// gauges: the heap's objects allocated (live, and those not yet collected:
// go_memstats_heap_alloc_bytes; the live heap alone is the heap profile's,
// taken after a GC), the heap's spans in use and those held but not in use
// (not yet returned to the kernel), the goroutine stacks and the runtime's
// own structures. RSS is about the sum of all but the allocated heap
// (which the spans in use contain).
func (p *leaderProc) goMemory(tb testing.TB, when string) {
	raw, err := p.scrape()
	if err != nil {
		tb.Logf("the leader's Go memory %s: %v", when, err)
		return
	}
	value := func(name string) float64 {
		v, err := sumMetric(raw, name)
		if err != nil {
			return -1
		}
		return v
	}
	mib := func(name string) float64 { return value(name) / (1 << 20) }
	idle, released := mib("go_memstats_heap_idle_bytes"), mib("go_memstats_heap_released_bytes")
	tb.Logf("the leader's Go memory %s: heap allocated %.0f MiB (next GC at %.0f), spans in use %.0f, held free %.0f; stacks %.0f; runtime %.0f (mspan %.0f, mcache %.0f, buckets %.0f, gc %.0f, other %.0f); %.0f goroutines; this /metrics %d KiB",
		when, mib("go_memstats_heap_alloc_bytes"), mib("go_memstats_next_gc_bytes"), mib("go_memstats_heap_inuse_bytes"), idle-released,
		mib("go_memstats_stack_inuse_bytes"),
		mib("go_memstats_mspan_inuse_bytes")+mib("go_memstats_mcache_inuse_bytes")+mib("go_memstats_buck_hash_sys_bytes")+mib("go_memstats_gc_sys_bytes")+mib("go_memstats_other_sys_bytes"),
		mib("go_memstats_mspan_inuse_bytes"), mib("go_memstats_mcache_inuse_bytes"), mib("go_memstats_buck_hash_sys_bytes"), mib("go_memstats_gc_sys_bytes"), mib("go_memstats_other_sys_bytes"),
		value("go_goroutines"), len(raw)>>10)
}

// scrape reads the leader's /metrics.
func (p *leaderProc) scrape() (string, error) {
	c := &http.Client{Timeout: 10 * time.Second}
	req, err := http.NewRequest(http.MethodGet, "http://"+p.metricsAddr+"/metrics", nil)
	if err != nil {
		return "", err
	}
	req.Header.Set("Authorization", "Bearer "+p.metricsToken)
	resp, err := c.Do(req)
	if err != nil {
		return "", fmt.Errorf("read the leader's /metrics: %w", err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return "", fmt.Errorf("read the leader's /metrics: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		// The leader requires a token allowed to read /metrics: read
		// without, every figure was 0.
		return "", fmt.Errorf("read the leader's /metrics: %s: %.200s", resp.Status, raw)
	}
	return string(raw), nil
}

// sumMetric sums the samples of metric name in a Prometheus text
// exposition whose labels contain every one of labels.
func sumMetric(raw, name string, labels ...string) (float64, error) {
	var sum float64
	for line := range strings.SplitSeq(raw, "\n") {
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		ok := true
		for _, l := range labels {
			ok = ok && strings.Contains(line, l)
		}
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err != nil {
			return 0, fmt.Errorf("parse %q: %w", line, err)
		}
		sum += v
	}
	return sum, nil
}

// apiMetric sums the apiserver's samples of metric name whose labels
// contain every one of labels (`key="value"`), from its /metrics.
func apiMetric(ctx context.Context, cs kubernetes.Interface, name string, labels ...string) (float64, error) {
	raw, err := apiMetrics(ctx, cs)
	if err != nil {
		return 0, err
	}
	return sumMetric(raw, name, labels...)
}

// apiMetrics reads the apiserver's /metrics.
func apiMetrics(ctx context.Context, cs kubernetes.Interface) (string, error) {
	raw, err := cs.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return "", fmt.Errorf("read the apiserver's /metrics: %w", err)
	}
	return string(raw), nil
}

// leaderRequests is how many requests of the leader the apiserver has
// dispatched: its FlowSchema's counter.
func leaderRequests(tb testing.TB, cs kubernetes.Interface) float64 {
	tb.Helper()
	v, err := apiMetric(context.Background(), cs, "apiserver_flowcontrol_dispatched_requests_total", `flow_schema="`+leaderFlowSchema+`"`)
	require.NoError(tb, err)
	return v
}

// resizeRequests is how many pods/resize requests the apiserver has
// served (any verb, any code).
func resizeRequests(tb testing.TB, cs kubernetes.Interface) float64 {
	tb.Helper()
	v, err := apiMetric(context.Background(), cs, "apiserver_request_total", `resource="pods"`, `subresource="resize"`)
	require.NoError(tb, err)
	return v
}

// tokenReviews is how many TokenReviews the apiserver has served.
func tokenReviews(tb testing.TB, cs kubernetes.Interface) float64 {
	tb.Helper()
	v, err := apiMetric(context.Background(), cs, "apiserver_request_total", `resource="tokenreviews"`)
	require.NoError(tb, err)
	return v
}

// agents are the simulated nodes' agents: the real node/stream.Client
// each, with its node's bound token, over TLS to the leader's stream.
type agents struct {
	clients []*agentstream.Client
	// regs are the clients' metrics registries, by node.
	regs   []*prometheus.Registry
	cancel context.CancelFunc
	done   chan struct{}
}

// nodeIP is node j's own loopback address, 127.1.x.y with y in 1..250
// (all of 127/8 is local on Linux): each simulated agent dials from it, as
// each node of a cluster has its own address, so that the leader's
// per-source limits see one source per node.
func nodeIP(j int) net.IP {
	return net.IPv4(127, 1, byte(j/250), byte(j%250+1))
}

// startAgents starts one client per node, from its own address (nodeIP),
// with the agent's default backoff (node/stream DefaultMinBackoff,
// DefaultMaxBackoff).
func startAgents(tb testing.TB, s *sim, addr string, pool *x509.CertPool, tokens []string) *agents {
	tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	a := &agents{cancel: cancel, done: make(chan struct{})}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	running := make(chan struct{}, s.m)
	for j := range s.m {
		d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: nodeIP(j)}}
		reg := prometheus.NewRegistry()
		c, err := agentstream.NewClient(agentstream.Config{
			Addr: addr, TLS: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12},
			TokenFile: tokens[j], NodeName: s.nodes[j], OOMSource: "bpf",
			Registerer: reg, Log: log,
			Dial: func(ctx context.Context, addr string) (net.Conn, error) { return d.DialContext(ctx, "tcp", addr) },
		})
		require.NoError(tb, err)
		a.clients, a.regs = append(a.clients, c), append(a.regs, reg)
		go func() { _ = c.Run(ctx); running <- struct{}{} }()
	}
	go func() {
		for range s.m {
			<-running
		}
		close(a.done)
	}()
	tb.Cleanup(a.stop)
	return a
}

func (a *agents) stop() { a.cancel(); <-a.done }

// connected is how many agents' streams are open.
func (a *agents) connected() int {
	n := 0
	for _, c := range a.clients {
		if c.State() == agentstream.Connected {
			n++
		}
	}
	return n
}

// bufferedOOM is how many OOM events the agents keep until the leader
// acknowledges them: the sum of node/stream's
// kerf_agent_stream_buffered_oom_events over the clients.
func (a *agents) bufferedOOM(tb testing.TB) int {
	tb.Helper()
	n := 0.0
	for _, reg := range a.regs {
		mfs, err := reg.Gather()
		require.NoError(tb, err)
		for _, mf := range mfs {
			if mf.GetName() == "kerf_agent_stream_buffered_oom_events" {
				for _, m := range mf.GetMetric() {
					n += m.GetGauge().GetValue()
				}
			}
		}
	}
	return int(n)
}

// waitConnected waits until every agent is connected and the leader
// counts every stream (kerf_stream_connected_agents: authenticated, its
// Hello read), and returns how long that took, or fails after timeout.
func (a *agents) waitConnected(tb testing.TB, p *leaderProc, timeout time.Duration) time.Duration {
	tb.Helper()
	start := time.Now()
	last := time.Now()
	for a.connected() < len(a.clients) {
		p.alive(tb)
		if time.Since(start) > timeout {
			tb.Fatalf("%d of %d agents connected after %v", a.connected(), len(a.clients), timeout)
		}
		if time.Since(last) > 15*time.Second {
			tb.Logf("%d of %d agents connected after %v", a.connected(), len(a.clients), time.Since(start).Round(time.Second))
			last = time.Now()
		}
		time.Sleep(50 * time.Millisecond)
	}
	// An agent's stream is open before the leader has authenticated it
	// (a TokenReview): it is back once the leader counts it.
	for {
		n, err := p.metric("kerf_stream_connected_agents")
		if err == nil && int(n) >= len(a.clients) {
			return time.Since(start)
		}
		p.alive(tb)
		if time.Since(start) > timeout {
			tb.Fatalf("the leader counts %.0f of %d agents' streams after %v (%v)", n, len(a.clients), timeout, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// sendCounters makes every agent report its node's containers' CFS
// counters and usage every interval, as the agent's sampler does, until
// ctx is done.
func sendCounters(ctx context.Context, s *sim, a *agents, interval time.Duration) {
	byNode := make([][]report.ContainerKey, s.m)
	for i := range s.pods {
		for k, uid := range s.pods[i] {
			j := s.podNode[i][k]
			byNode[j] = append(byNode[j], report.ContainerKey{PodUID: string(uid), Name: "app"})
		}
	}
	for k, uid := range s.inPlacePods {
		j := s.inPlaceNodes[k]
		byNode[j] = append(byNode[j], report.ContainerKey{PodUID: string(uid), Name: "app"})
	}
	// Each container's CPU counter grows by 20 to 79 ms an interval and its
	// working set moves between 80 and 143 MiB, varying with the container
	// and the interval, so that the recommender's histograms (make
	// bench-scale's recommending variant) hold a spread, not one bucket.
	cpu := make([][]time.Duration, s.m)
	for j, keys := range byNode {
		cpu[j] = make([]time.Duration, len(keys))
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for n := uint64(1); ; n++ {
		now := time.Now()
		for j, keys := range byNode {
			samples := make([]report.Sample, len(keys))
			for k, key := range keys {
				vary := uint64(j*31+k*7) + n*13
				cpu[j][k] += time.Duration(20+vary%60) * time.Millisecond
				ws := (80 + vary%64) << 20
				samples[k] = report.Sample{Key: key, At: now, Periods: 10 * n, Throttled: n, ThrottledTime: time.Duration(n) * time.Millisecond,
					HasUsage: true, Usage: report.Usage{CPU: cpu[j][k], WorkingSet: ws, Peak: ws + 20<<20}}
			}
			a.clients[j].Counters(samples)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// rollbackTimes logs where the leader's rollbacks spent their time, from
// its "rolled back" log lines (cluster/rightsizing/rollback.go): the pass until its
// restore was written, the breach's status write and the restore's
// writes, p50 and max of each. For the probes, by recommendation
// ("namespace/name") with when the harness sent each one's OOM kill, it
// logs how long after the kill the leader began the pass, asked for the
// rollback's first write (the breach's status), asked for the restore
// and had the restore answered, p50, p99 and max of each, and the
// slowest probe's steps: the leader's log and the harness read one wall
// clock. It returns the probes' times since their kill by step, sorted.
func (p *leaderProc) rollbackTimes(tb testing.TB, killed map[string]time.Time) (sinceKill map[string][]float64) {
	raw, err := os.ReadFile(p.logPath)
	if err != nil {
		tb.Logf("the leader's rollbacks: %v", err)
		return nil
	}
	fields := []string{"untilRestoredMs", "breachWriteMs", "restoreWriteMs", "passMs"}
	got := map[string][]float64{}
	steps := []string{"passBegan", "breachAsked", "restoreAsked", "restoreAnswered"}
	sinceKill = map[string][]float64{}
	var slowest time.Duration
	var slowestProbe string
	for line := range strings.SplitSeq(string(raw), "\n") {
		if !strings.Contains(line, `"msg":"rolled back"`) {
			continue
		}
		var rec map[string]any
		if json.Unmarshal([]byte(line), &rec) != nil {
			continue
		}
		for _, f := range fields {
			if v, ok := rec[f].(float64); ok {
				got[f] = append(got[f], v)
			}
		}
		name, _ := rec["recommendation"].(string)
		kill, ok := killed[name]
		if !ok {
			continue
		}
		at := map[string]time.Time{}
		for _, f := range steps[:3] {
			if v, ok := rec[f].(string); ok {
				if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
					at[f] = t
				}
			}
		}
		if w, ok := rec["restoreWriteMs"].(float64); ok && !at["restoreAsked"].IsZero() {
			at["restoreAnswered"] = at["restoreAsked"].Add(time.Duration(w * float64(time.Millisecond)))
		}
		var probe []string
		for _, f := range steps {
			if t, ok := at[f]; ok {
				ms := float64(t.Sub(kill).Microseconds()) / 1000
				sinceKill[f] = append(sinceKill[f], ms)
				probe = append(probe, fmt.Sprintf("%s %.1f", f, ms))
			}
		}
		if t, ok := at["restoreAnswered"]; ok && t.Sub(kill) > slowest {
			slowest, slowestProbe = t.Sub(kill), name+": "+strings.Join(probe, ", ")+" ms"
		}
	}
	var parts []string
	for _, f := range fields {
		slices.Sort(got[f])
		parts = append(parts, fmt.Sprintf("%s p50 %.1f, max %.1f", f, percentile(got[f], 0.5), percentile(got[f], 1)))
	}
	tb.Logf("the leader's %d rollbacks, by its log: %s", len(got[fields[0]]), strings.Join(parts, "; "))
	parts = parts[:0]
	for _, f := range steps {
		l := sinceKill[f]
		slices.Sort(l)
		parts = append(parts, fmt.Sprintf("%s %d: p50 %.1f, p99 %.1f, max %.1f ms", f, len(l), percentile(l, 0.5), percentile(l, 0.99), percentile(l, 1)))
	}
	tb.Logf("the probes' OOM kill → the leader, by its log (a restore finished by a later pass has no breachAsked): %s; the slowest, %s", strings.Join(parts, "; "), slowestProbe)
	return sinceKill
}

// apiTimings are the apiserver's own time for the requests a rollback
// makes (the fence's Lease read, the recommendation's status write, the
// Deployment's patch), and how long the leader's requests waited in its
// APF queues: the sum and count of each histogram, by name.
type apiTimings map[string][2]float64

// apiTimingSeries are the histograms apiTimings reads, by name.
var apiTimingSeries = []struct {
	name, metric string
	labels       []string
}{
	{"GET lease", "apiserver_request_duration_seconds", []string{`verb="GET"`, `resource="leases"`}},
	{"PUT recommendation status", "apiserver_request_duration_seconds", []string{`verb="PUT"`, `resource="rightsizingrecommendations"`, `subresource="status"`}},
	{"PATCH deployment", "apiserver_request_duration_seconds", []string{`verb="PATCH"`, `resource="deployments"`, `subresource=""`}},
	{"the leader's APF queue wait", "apiserver_flowcontrol_request_wait_duration_seconds", []string{`flow_schema="` + leaderFlowSchema + `"`}},
}

// readAPITimings reads apiTimings from the apiserver's /metrics.
func readAPITimings(tb testing.TB, cs kubernetes.Interface) apiTimings {
	raw, err := apiMetrics(context.Background(), cs)
	require.NoError(tb, err)
	t := apiTimings{}
	for _, s := range apiTimingSeries {
		sum, err1 := sumMetric(raw, s.metric+"_sum", s.labels...)
		n, err2 := sumMetric(raw, s.metric+"_count", s.labels...)
		require.NoError(tb, errors.Join(err1, err2), "%s", s.metric)
		t[s.name] = [2]float64{sum, n}
	}
	return t
}

// logAPITimings logs the mean of each of apiTimings between from and to.
func logAPITimings(tb testing.TB, when string, from, to apiTimings) {
	var parts []string
	for _, s := range apiTimingSeries {
		sum, n := to[s.name][0]-from[s.name][0], to[s.name][1]-from[s.name][1]
		parts = append(parts, fmt.Sprintf("%s %.1f ms (%.0f)", s.name, 1000*sum/max(n, 1), n))
	}
	tb.Logf("the apiserver's mean time %s: %s", when, strings.Join(parts, "; "))
}

// requestKinds counts the requests the apiserver served, by verb,
// resource and subresource ("GET pods", "PUT rightsizingrecommendations/status"),
// from its apiserver_request_total.
func requestKinds(tb testing.TB, cs kubernetes.Interface) map[string]float64 {
	raw, err := apiMetrics(context.Background(), cs)
	require.NoError(tb, err)
	label := func(line, name string) string {
		i := strings.Index(line, name+`="`)
		if i < 0 {
			return ""
		}
		rest := line[i+len(name)+2:]
		return rest[:max(strings.IndexByte(rest, '"'), 0)]
	}
	kinds := map[string]float64{}
	for line := range strings.SplitSeq(raw, "\n") {
		if !strings.HasPrefix(line, "apiserver_request_total{") {
			continue
		}
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		require.NoError(tb, err, "parse %q", line)
		kind := label(line, "verb") + " " + label(line, "resource")
		if sub := label(line, "subresource"); sub != "" {
			kind += "/" + sub
		}
		kinds[kind] += v
	}
	return kinds
}

// logRequestKinds logs the kinds of request the apiserver served most
// between two requestKinds, with their rate over d.
func logRequestKinds(tb testing.TB, when string, from, to map[string]float64, d time.Duration) {
	type kind struct {
		name string
		n    float64
	}
	var kinds []kind
	for name, n := range to {
		if n -= from[name]; n > 0 {
			kinds = append(kinds, kind{name, n})
		}
	}
	slices.SortFunc(kinds, func(a, b kind) int { return cmp.Compare(b.n, a.n) })
	var parts []string
	for _, k := range kinds[:min(len(kinds), 8)] {
		parts = append(parts, fmt.Sprintf("%s %.1f/s", k.name, k.n/d.Seconds()))
	}
	tb.Logf("the apiserver's requests %s (every client's): %s", when, strings.Join(parts, ", "))
}
