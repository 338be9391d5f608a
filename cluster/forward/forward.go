// Package forward delivers the leader's actions to kerf-hub: every entry
// of every RightsizingRecommendation's status.history. It also sends the
// hub the leader's per-namespace savings figures (cluster/savings), every
// 5 minutes and within 30 seconds of a change (SavingsReport).
//
// docs/hub.md, "The leader's side: forwarding", describes it. Delivery is
// at least once, in order per recommendation, in batches, with an
// idempotency key per action and backoff with jitter on failure.
//
// It runs beside the reconciler, never inside it. The reconciler records
// an action in status.history (cluster/rightsizing/record.go) and goes on.
// The Forwarder, a manager Runnable that only the elected leader runs,
// reads the recommendations from the cache and sends what the hub has not
// acknowledged yet. A hub that is down or slow therefore delays nothing
// but the hub.
//
// What is undelivered is kept in the cluster, not in the process. The
// recommendation's own history is the buffer. A ConfigMap
// (CursorConfigMap) holds each recommendation's delivered-up-to cursor,
// the Seq of its last action the hub acknowledged. The finalizer
// kerf.dev/hub-delivery keeps a deleted recommendation until its actions
// are delivered, or until FinalizerTimeout has passed; the rest is then
// counted as dropped. Actions trimmed out of the 100-entry history before
// delivery are counted as dropped too.
//
// Without a hub, the leader runs the Releaser instead, which removes the
// finalizer the Forwarder added.
package forward

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	auditv1 "github.com/kerf-dev/kerf/api/audit/v1"
	hubv1 "github.com/kerf-dev/kerf/api/hub/v1"
	"github.com/kerf-dev/kerf/api/v1alpha1"
)

// Finalizer keeps a deleted recommendation until the hub has its actions,
// or until FinalizerTimeout has passed.
const Finalizer = "kerf.dev/hub-delivery"

// CursorConfigMap is the ConfigMap, in the leader's namespace, that holds
// every recommendation's delivered-up-to cursor: the Seq of its last
// action the hub acknowledged. It is one ConfigMap for all, written once
// per delivered batch. So the cursors never touch the recommendations,
// whose status the reconciler updates with optimistic concurrency. The
// cursors are packed under packedCursorsKey.
const CursorConfigMap = "kerf-hub-delivery"

// Config configures a Forwarder.
type Config struct {
	// URL is the hub's base URL, such as https://kerf-hub:9443.
	URL string
	// TokenFile holds the cluster's hub token; it is read again for every
	// batch, so a rotated token is used without a restart.
	TokenFile string
	// Cluster is the cluster's name as registered on the hub.
	Cluster string
	// TLS is the client TLS configuration (the hub's CA); nil means the
	// system's roots.
	TLS *tls.Config
	// Namespace holds CursorConfigMap (the leader's namespace).
	Namespace string
	// Identity names the leader in the batches' report (its pod name).
	Identity string
	// AgentsConnected, when set, says how many agents stream to the leader,
	// for the batches' report.
	AgentsConnected func() int
	// Interval is how often the recommendations are looked at when all
	// was delivered; zero means 2 s.
	Interval time.Duration
	// Heartbeat is how often an empty batch tells the hub the leader is
	// there when there is nothing to send; zero means 1 min.
	Heartbeat time.Duration
	// BatchSize is the most actions per batch; zero means 100 (a batch of
	// the largest actions stays under the hub's 4 MiB).
	BatchSize int
	// MinBackoff and MaxBackoff bound the wait after a failed batch, which
	// doubles from the one to the other, with jitter; zero means 1 s and
	// 5 min.
	MinBackoff, MaxBackoff time.Duration
	// SavingsEvery is how often the savings report (SavingsReport) is
	// computed and, when it changed, sent; zero means 30 s.
	SavingsEvery time.Duration
	// SavingsHeartbeat is how often the report is sent unchanged, so that
	// the hub's pages know it is current; zero means 5 min.
	SavingsHeartbeat time.Duration
	// FinalizerTimeout is how long a deleted recommendation waits for its
	// actions to be delivered; then its finalizer is removed and what was
	// not delivered is counted in kerf_hub_dropped_total{reason="deleted"}.
	// Zero means 24 h.
	FinalizerTimeout time.Duration
	// Registerer receives the kerf_hub_* metrics; nil registers none.
	Registerer prometheus.Registerer
	// HTTPClient, when set, sends the batches (tests); nil builds one
	// from TLS.
	HTTPClient *http.Client
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Log receives what went wrong; nil means slog.Default().
	Log *slog.Logger
	// Recommendations, when set, gives each pass the recommendations.
	// The leader's reads its cache's own objects, where a list copies
	// every one's struct every pass (docs/leader.md, "Memory: how tight a
	// limit costs what"). Nil lists them through the client.
	Recommendations Recommendations
}

// Recommendations returns every recommendation, only to be read.
type Recommendations func(context.Context) ([]*v1alpha1.RightsizingRecommendation, error)

// recommendations returns every recommendation, only to be read: from
// the configured source, or a list through the cache's client.
func (f *Forwarder) recommendations(ctx context.Context) ([]*v1alpha1.RightsizingRecommendation, error) {
	if f.cfg.Recommendations != nil {
		return f.cfg.Recommendations(ctx)
	}
	// The cache's own objects: copies of every recommendation held much
	// of the leader's heap at a wave's end (docs/performance.md, "The
	// fifth round"). They are only read; the patches are made from copies
	// (patchFinalizers).
	return ListRecommendations(ctx, f.client)
}

// ListRecommendations lists every recommendation through c without
// copies, only to be read. It lists with client.UnsafeDisableDeepCopy:
// from a cache, the items share its objects.
func ListRecommendations(ctx context.Context, c client.Reader) ([]*v1alpha1.RightsizingRecommendation, error) {
	var list v1alpha1.RightsizingRecommendationList
	if err := c.List(ctx, &list, client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("list RightsizingRecommendations: %w", err)
	}
	out := make([]*v1alpha1.RightsizingRecommendation, len(list.Items))
	for i := range list.Items {
		out[i] = &list.Items[i]
	}
	return out, nil
}

// Validate says what is missing or wrong in what the operator gives: the
// URL, the token file and the cluster's name.
func (c *Config) Validate() error {
	u, err := url.Parse(c.URL)
	switch {
	case err != nil:
		return fmt.Errorf("hub URL %q: %w", c.URL, err)
	case u.Scheme != "https" || u.Host == "":
		return fmt.Errorf("hub URL %q: must be https://host[:port] (the hub serves TLS only)", c.URL)
	case c.TokenFile == "":
		return errors.New("hub: a token file is required with a hub URL")
	case c.Cluster == "":
		return errors.New("hub: a cluster name is required with a hub URL")
	}
	return nil
}

// Forwarder sends the recommendations' actions to the hub. It is a
// manager Runnable that needs leader election: only the elected leader
// runs it.
type Forwarder struct {
	cfg     Config
	client  client.Client // reads recommendations from the cache; writes finalizers
	api     client.Reader // reads the cursor ConfigMap
	http    *http.Client
	metrics *metrics
	log     *slog.Logger

	// cursors are the delivered-up-to Seqs by recommendation UID, as last
	// read from or written to CursorConfigMap; cm is that ConfigMap.
	cursors map[types.UID]int64
	cm      *corev1.ConfigMap
	dirty   bool
	// limit, when positive, caps the next batch: the hub refused the
	// action at that index, so the ones before it go first.
	limit         int
	lastHeartbeat time.Time
	// savingsChecked is when the savings were last computed; savingsSent
	// the namespaces the hub last took (or refused), at savingsSentAt.
	savingsChecked time.Time
	savingsSent    []hubv1.NamespaceSavings
	savingsSentAt  time.Time
}

// New returns a Forwarder for cfg. c is the manager's client (cached
// reads); api reads what the cache does not hold (the manager's API
// reader).
func New(cfg Config, c client.Client, api client.Reader) (*Forwarder, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Namespace == "" {
		return nil, errors.New("hub: the namespace of the cursor ConfigMap is required")
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&cfg.Interval, 2*time.Second)
	def(&cfg.Heartbeat, time.Minute)
	def(&cfg.MinBackoff, time.Second)
	def(&cfg.MaxBackoff, 5*time.Minute)
	def(&cfg.FinalizerTimeout, 24*time.Hour)
	def(&cfg.SavingsEvery, 30*time.Second)
	def(&cfg.SavingsHeartbeat, 5*time.Minute)
	if cfg.BatchSize <= 0 || cfg.BatchSize > hubv1.MaxBatchActions {
		cfg.BatchSize = 100
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	f := &Forwarder{cfg: cfg, client: c, api: api, http: cfg.HTTPClient, metrics: newMetrics(cfg.Registerer), log: cfg.Log}
	if f.log == nil {
		f.log = slog.Default()
	}
	f.log = f.log.With("hub", cfg.URL)
	if f.http == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.TLSClientConfig = cfg.TLS.Clone() // a Transport writes into its config (NextProtos): never share the caller's
		f.http = &http.Client{Transport: tr, Timeout: 30 * time.Second}
	}
	return f, nil
}

// NeedLeaderElection makes the manager run the Forwarder only on the
// elected leader.
func (f *Forwarder) NeedLeaderElection() bool { return true }

// Start delivers until ctx is done. Failures are logged, counted and
// retried with backoff; Start returns nil when ctx ends.
func (f *Forwarder) Start(ctx context.Context) error {
	f.log.Info("forwarding actions to the hub", "cluster", f.cfg.Cluster)
	backoff := time.Duration(0)
	for {
		more, err := f.Pass(ctx)
		wait := f.cfg.Interval
		switch {
		case ctx.Err() != nil:
			return nil
		case err != nil:
			backoff = min(max(2*backoff, f.cfg.MinBackoff), f.cfg.MaxBackoff)
			// Equal jitter: between half the backoff and all of it, so
			// that leaders of many clusters do not retry in step.
			wait = backoff/2 + rand.N(backoff/2+1)
			f.log.Warn("hub delivery failed; retrying", "retryIn", wait.Round(time.Millisecond).String(), "err", err)
		case more:
			backoff, wait = 0, 0
		default:
			backoff = 0
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
	}
}

// pending is one recommendation's undelivered actions, oldest first.
type pending struct {
	rsr     *v1alpha1.RightsizingRecommendation
	actions []hubv1.Action
}

// Pass does one round of delivery. It reads the recommendations, counts
// what was trimmed before delivery and manages finalizers. It sends the
// savings report when due, then one batch of the oldest undelivered
// actions, and advances the cursors the hub acknowledged. more says there
// is more to send at once.
func (f *Forwarder) Pass(ctx context.Context) (more bool, err error) {
	if f.cursors == nil {
		if err := f.loadCursors(ctx); err != nil {
			return false, err
		}
	}
	rsrs, err := f.recommendations(ctx)
	if err != nil {
		return false, err
	}
	now := f.cfg.Now()
	seen := make(map[types.UID]bool, len(rsrs))
	var todo []*pending
	var undelivered int64
	var oldest time.Time
	for _, rsr := range rsrs {
		seen[rsr.UID] = true
		p := f.undelivered(rsr)
		if rsr.DeletionTimestamp == nil {
			if err := f.ensureFinalizer(ctx, rsr); err != nil {
				f.log.Warn("add the hub-delivery finalizer", "recommendation", rsr.Namespace+"/"+rsr.Name, "err", err)
			}
		} else if controllerutil.ContainsFinalizer(rsr, Finalizer) {
			if len(p.actions) == 0 || now.Sub(rsr.DeletionTimestamp.Time) >= f.cfg.FinalizerTimeout {
				if n := len(p.actions); n > 0 {
					f.metrics.dropped.WithLabelValues("deleted").Add(float64(n))
					f.log.Error("a deleted recommendation's actions were not delivered in time; dropped", "recommendation", rsr.Namespace+"/"+rsr.Name, "actions", n, "finalizerTimeout", f.cfg.FinalizerTimeout.String())
					p.actions = nil
				}
				if err := f.removeFinalizer(ctx, rsr); err != nil {
					f.log.Warn("remove the hub-delivery finalizer", "recommendation", rsr.Namespace+"/"+rsr.Name, "err", err)
				}
			}
		}
		if len(p.actions) > 0 {
			todo = append(todo, p)
			undelivered += int64(len(p.actions))
			if t := p.actions[0].Time.Time; oldest.IsZero() || t.Before(oldest) {
				oldest = t
			}
		}
	}
	// The cursors of recommendations that are gone (their finalizer
	// removed) are forgotten.
	for uid := range f.cursors {
		if !seen[uid] {
			delete(f.cursors, uid)
			f.dirty = true
		}
	}
	lag := 0.0
	if !oldest.IsZero() {
		lag = max(now.Sub(oldest).Seconds(), 0)
	}
	f.metrics.undelivered.Set(float64(undelivered))
	f.metrics.lag.Set(lag)
	f.reportSavings(ctx, rsrs, now)

	batch := f.cut(todo)
	if len(batch) == 0 && now.Sub(f.lastHeartbeat) < f.cfg.Heartbeat {
		return false, f.saveCursors(ctx)
	}
	report := hubv1.LeaderReport{Identity: f.cfg.Identity, Undelivered: undelivered, LagSeconds: lag}
	if f.cfg.AgentsConnected != nil {
		report.AgentsConnected = f.cfg.AgentsConnected()
	}
	if err := f.send(ctx, hubv1.Batch{Cluster: f.cfg.Cluster, Leader: report, Actions: batch}); err != nil {
		// What the hub did acknowledge (none, or a refused action's
		// cursor) is still saved.
		return false, errors.Join(err, f.saveCursors(ctx))
	}
	f.lastHeartbeat = now
	for _, a := range batch {
		f.advance(a)
	}
	rest := undelivered - int64(len(batch))
	f.metrics.undelivered.Set(float64(rest))
	if rest == 0 {
		f.metrics.lag.Set(0)
	}
	return rest > 0, f.saveCursors(ctx)
}

// undelivered returns the recommendation's actions after its cursor, and
// counts (and skips) the ones trimmed out of its history before they were
// delivered.
func (f *Forwarder) undelivered(rsr *v1alpha1.RightsizingRecommendation) *pending {
	p := &pending{rsr: rsr}
	h := rsr.Status.History
	if len(h) == 0 {
		return p
	}
	cur := f.cursors[rsr.UID]
	if first := SeqOf(h, 0); first > cur+1 {
		n := first - cur - 1
		f.metrics.dropped.WithLabelValues("trimmed").Add(float64(n))
		f.log.Error("actions left the recommendation's history before the hub had them; dropped", "recommendation", rsr.Namespace+"/"+rsr.Name, "actions", n, "fromSeq", cur+1, "toSeq", first-1)
		f.setCursor(rsr.UID, first-1)
		cur = first - 1
	}
	for i := range h {
		seq := SeqOf(h, i)
		if seq <= cur {
			continue
		}
		var phase v1alpha1.Phase
		if i == len(h)-1 {
			phase = rsr.Status.Phase // the phase after the newest action
		}
		p.actions = append(p.actions, hubv1.Action{Key: Key(rsr.UID, seq), Seq: seq, Phase: phase, Entry: auditv1.EntryOf(rsr, &h[i])})
	}
	return p
}

// SeqOf is the Seq of history[i]: its own, or its position from 1. The
// position is for a history recorded before Seq existed, whose newest
// entry has none. The leader numbers such a history so at its next action.
func SeqOf(history []v1alpha1.Action, i int) int64 {
	if history[len(history)-1].Seq == 0 {
		return int64(i + 1)
	}
	return history[i].Seq
}

// Key is the idempotency key of a recommendation's action: its UID and the
// action's Seq. A UID is never reused. A Seq names one action of it
// forever, since it survives the history's trim. So the key names one
// action on the hub, which scopes keys by cluster. A resend after a
// failover or a lost answer carries the same key, and the hub
// acknowledges it as a duplicate.
func Key(uid types.UID, seq int64) string {
	return string(uid) + "/" + strconv.FormatInt(seq, 10)
}

// cut takes the batch: the oldest undelivered actions, at most BatchSize
// (or the limit a refusal set), each recommendation's in its order. It
// merges the recommendations' lists by their next action's time, so a
// recommendation's actions always go as a prefix of what it has left.
func (f *Forwarder) cut(todo []*pending) []hubv1.Action {
	n := f.cfg.BatchSize
	if f.limit > 0 {
		n, f.limit = min(n, f.limit), 0
	}
	var out []hubv1.Action
	for len(out) < n {
		best := -1
		for i, p := range todo {
			if len(p.actions) == 0 {
				continue
			}
			if best < 0 || p.actions[0].Time.Before(&todo[best].actions[0].Time) {
				best = i
			}
		}
		if best < 0 {
			break
		}
		out = append(out, todo[best].actions[0])
		todo[best].actions = todo[best].actions[1:]
	}
	return out
}

// advance moves the cursor of the action's recommendation to it.
func (f *Forwarder) advance(a hubv1.Action) {
	uid, seq, ok := strings.Cut(a.Key, "/")
	if !ok {
		return
	}
	n, err := strconv.ParseInt(seq, 10, 64)
	if err != nil {
		return
	}
	f.setCursor(types.UID(uid), n)
}

func (f *Forwarder) setCursor(uid types.UID, seq int64) {
	if f.cursors[uid] < seq {
		f.cursors[uid] = seq
		f.dirty = true
	}
}

// hubError is an answer of the hub other than 200.
type hubError struct {
	status int
	body   auditv1.Error
}

func (e *hubError) Error() string {
	return fmt.Sprintf("hub answered %d: %s", e.status, e.body.Error)
}

// send posts the batch and counts the result. A refusal may name one
// action: 400 or 409 with actions[i]. It drops that action when it is the
// batch's first, and otherwise limits the next batch to the actions
// before it. So nothing else waits behind an action the hub will never
// take.
func (f *Forwarder) send(ctx context.Context, b hubv1.Batch) error {
	err := f.post(ctx, b)
	var he *hubError
	switch {
	case err == nil:
		f.metrics.batches.WithLabelValues("delivered").Inc()
		return nil
	case errors.As(err, &he) && he.status >= 400 && he.status < 500:
		f.metrics.batches.WithLabelValues("refused").Inc()
		if i, ok := refusedAction(he); ok && i < len(b.Actions) && (he.status == http.StatusBadRequest || he.status == http.StatusConflict) {
			if i == 0 {
				a := b.Actions[0]
				f.metrics.dropped.WithLabelValues("refused").Inc()
				f.log.Error("the hub refused an action; dropped", "key", a.Key, "recommendation", a.Namespace+"/"+a.Recommendation, "err", he.body.Error)
				f.advance(a)
			} else {
				f.limit = i
			}
		}
		return err
	default:
		f.metrics.batches.WithLabelValues("failed").Inc()
		return err
	}
}

// refusedAction reads i from a refusal's field actions[i]....
func refusedAction(he *hubError) (int, bool) {
	rest, ok := strings.CutPrefix(he.body.Field, "actions[")
	if !ok {
		return 0, false
	}
	num, _, ok := strings.Cut(rest, "]")
	if !ok {
		return 0, false
	}
	i, err := strconv.Atoi(num)
	return i, err == nil && i >= 0
}

// post sends one batch and requires a 200 that acknowledges every action.
func (f *Forwarder) post(ctx context.Context, b hubv1.Batch) error {
	if b.Actions == nil {
		b.Actions = []hubv1.Action{}
	}
	raw, err := f.request(ctx, http.MethodPost, "actions", fmt.Sprintf("%d actions", len(b.Actions)), b)
	if err != nil {
		return err
	}
	var res hubv1.BatchResult
	if err := json.Unmarshal(raw, &res); err != nil {
		return fmt.Errorf("decode the hub's answer: %w", err)
	}
	if len(res.Actions) != len(b.Actions) {
		return fmt.Errorf("the hub acknowledged %d actions of %d", len(res.Actions), len(b.Actions))
	}
	return nil
}

// request sends v as JSON to the cluster's path on the hub, with the hub
// token. It returns the answer's body (at most 1 MiB); an answer other
// than 200 is a *hubError. what names the request in errors.
func (f *Forwarder) request(ctx context.Context, method, path, what string, v any) ([]byte, error) {
	token, err := os.ReadFile(f.cfg.TokenFile)
	if err != nil {
		return nil, fmt.Errorf("read the hub token: %w", err)
	}
	body, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("encode %s: %w", what, err)
	}
	u := strings.TrimSuffix(f.cfg.URL, "/") + "/v1/clusters/" + url.PathEscape(f.cfg.Cluster) + "/" + path
	req, err := http.NewRequestWithContext(ctx, method, u, bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("build the request of %s: %w", what, err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(token)))
	resp, err := f.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", strings.ToLower(method), what, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, fmt.Errorf("read the hub's answer: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		he := &hubError{status: resp.StatusCode}
		if json.Unmarshal(raw, &he.body) != nil || he.body.Error == "" {
			he.body.Error = strings.TrimSpace(string(raw))
		}
		return nil, he
	}
	return raw, nil
}
