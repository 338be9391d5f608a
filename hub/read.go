package hub

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"

	auditv1 "github.com/kerf-dev/kerf/api/audit/v1"
	hubv1 "github.com/kerf-dev/kerf/api/hub/v1"
	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/hub/store"
	"github.com/kerf-dev/kerf/internal/httpjson"
)

// Limits of one page of the read API, the leader's (cluster/audit).
const (
	// DefaultLimit is the page size when the limit parameter is absent.
	DefaultLimit = 100
	// MaxLimit is the largest limit accepted.
	MaxLimit = 1000
)

// readTimeout bounds one read query.
const readTimeout = 30 * time.Second

// paramError is bad input in one query or path parameter.
type paramError struct {
	param string
	msg   string
}

func (e *paramError) Error() string { return e.msg }

func badParam(param, format string, args ...any) error {
	return &paramError{param: param, msg: fmt.Sprintf(format, args...)}
}

func writeParamError(w http.ResponseWriter, err error) {
	body := auditv1.Error{Error: err.Error()}
	if pe, ok := errors.AsType[*paramError](err); ok {
		body.Parameter = pe.param
	}
	httpjson.Write(w, http.StatusBadRequest, body)
}

// query is a parsed query string whose parameters are each given at most
// once (an empty value counts as absent, as on the leader).
type query map[string]string

func parseQuery(raw string, allowed ...string) (query, error) {
	vals, err := url.ParseQuery(raw)
	if err != nil {
		return nil, fmt.Errorf("query %q: %w", raw, err)
	}
	q := query{}
	for _, k := range slices.Sorted(maps.Keys(vals)) {
		if !slices.Contains(allowed, k) {
			if len(allowed) == 0 {
				return nil, badParam(k, "unknown query parameter %q: this endpoint takes none", k)
			}
			return nil, badParam(k, "unknown query parameter %q: must be one of %s", k, strings.Join(allowed, ", "))
		}
		var got []string
		for _, v := range vals[k] {
			if v != "" {
				got = append(got, v)
			}
		}
		if len(got) > 1 && k != "type" {
			return nil, badParam(k, "%s: give it once, not %d times", k, len(got))
		}
		if len(got) > 0 {
			q[k] = strings.Join(got, ",")
		}
	}
	return q, nil
}

func (q query) limit() (int, error) {
	v, ok := q["limit"]
	if !ok {
		return DefaultLimit, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > MaxLimit {
		return 0, badParam("limit", "limit %q: must be a whole number from 1 to %d", v, MaxLimit)
	}
	return n, nil
}

func (q query) name(param string, check func(string) []string, what string) (string, error) {
	v := q[param]
	if v != "" && len(check(v)) > 0 {
		return "", badParam(param, "%s %q: must be %s", param, v, what)
	}
	return v, nil
}

const (
	labelRule = "a name of lower-case letters, digits and '-', at most 63"
)

// cursorVersion is the version of the continue tokens' layout.
const cursorVersion = 1

type actionCursor struct {
	V    int   `json:"v"`
	Time int64 `json:"t"`
	Seq  int64 `json:"s"`
	ID   int64 `json:"i"`
}

type workloadCursor struct {
	V         int    `json:"v"`
	Cluster   string `json:"c"`
	Namespace string `json:"ns"`
	Kind      string `json:"k"`
	Name      string `json:"n"`
}

func encodeCursor(v any) string {
	b, _ := json.Marshal(v)
	return base64.RawURLEncoding.EncodeToString(b)
}

func decodeCursor(s string, v any) error {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return errors.New("not base64url")
	}
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return errors.New("not a cursor")
	}
	// Only the API's own spelling (encoding/json also takes keys in any
	// case and ignores what follows the object): a token that decodes
	// re-encodes to itself.
	if encodeCursor(v) != s {
		return errors.New("not in the form this API gives")
	}
	return nil
}

func badCursor(s string, err error) error {
	return badParam("continue", "continue %q: not a cursor of this API (%v); pass the previous page's \"continue\" value unchanged", s, err)
}

func (q query) actionCursor() (*store.Position, error) {
	s, ok := q["continue"]
	if !ok {
		return nil, nil
	}
	var c actionCursor
	if err := decodeCursor(s, &c); err != nil {
		return nil, badCursor(s, err)
	}
	if c.V != cursorVersion || c.ID < 1 {
		return nil, badCursor(s, errors.New("another version or an incomplete cursor"))
	}
	return &store.Position{Time: c.Time, Seq: c.Seq, ID: c.ID}, nil
}

func actionContinue(p *store.Position) string {
	if p == nil {
		return ""
	}
	return encodeCursor(actionCursor{V: cursorVersion, Time: p.Time, Seq: p.Seq, ID: p.ID})
}

// serveAudit answers GET /v1/audit: every cluster's actions, newest first,
// with the leader's parameters plus cluster.
func (s *Server) serveAudit(w http.ResponseWriter, r *http.Request) {
	aq, err := s.parseAudit(r.URL.RawQuery)
	if err != nil {
		writeParamError(w, err)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), readTimeout)
	defer cancel()
	items, next, err := s.Store.Actions(ctx, aq)
	if err != nil {
		s.failed(w, r, err)
		return
	}
	httpjson.Write(w, http.StatusOK, hubv1.AuditPage{Items: items, Continue: actionContinue(next)})
}

func (s *Server) parseAudit(raw string) (store.ActionQuery, error) {
	var aq store.ActionQuery
	q, err := parseQuery(raw, "type", "cluster", "reason", "namespace", "since", "limit", "continue")
	if err != nil {
		return aq, err
	}
	if v, ok := q["type"]; ok {
		for t := range strings.SplitSeq(v, ",") {
			t = strings.TrimSpace(t)
			if t == "" {
				continue
			}
			if !slices.Contains(actionTypes, v1alpha1.ActionType(t)) {
				return aq, badParam("type", "type %q: must be one of %s", t, join(actionTypes))
			}
			if !slices.Contains(aq.Types, v1alpha1.ActionType(t)) {
				aq.Types = append(aq.Types, v1alpha1.ActionType(t))
			}
		}
	}
	if aq.Cluster, err = q.name("cluster", validation.IsDNS1123Label, "a cluster name ("+labelRule+")"); err != nil {
		return aq, err
	}
	if aq.Namespace, err = q.name("namespace", validation.IsDNS1123Label, "a namespace name ("+labelRule+")"); err != nil {
		return aq, err
	}
	aq.Reason = q["reason"]
	if v, ok := q["since"]; ok {
		if aq.Since, err = parseSince(v, s.now()); err != nil {
			return aq, err
		}
	}
	if aq.Limit, err = q.limit(); err != nil {
		return aq, err
	}
	aq.After, err = q.actionCursor()
	return aq, err
}

// parseSince reads an RFC 3339 timestamp, or a Go duration that counts back
// from now, as the leader does.
func parseSince(v string, now time.Time) (time.Time, error) {
	const rule = "must be an RFC 3339 timestamp (2006-01-02T15:04:05Z) or a duration back from now (90s, 15m, 1h30m)"
	if d, err := time.ParseDuration(v); err == nil {
		if d < 0 {
			return time.Time{}, badParam("since", "since %q: %s, not negative", v, rule)
		}
		return now.Add(-d), nil
	}
	for _, c := range []string{v, strings.ReplaceAll(v, " ", "+")} {
		if t, err := time.Parse(time.RFC3339, c); err == nil {
			return t, nil
		}
	}
	return time.Time{}, badParam("since", "since %q: %s", v, rule)
}

// serveWorkloads answers GET /v1/workloads: each workload with its phase
// and newest action, by cluster, namespace, kind and name.
func (s *Server) serveWorkloads(w http.ResponseWriter, r *http.Request) {
	q, err := parseQuery(r.URL.RawQuery, "cluster", "namespace", "phase", "limit", "continue")
	var wq store.WorkloadQuery
	if err == nil {
		wq.Cluster, err = q.name("cluster", validation.IsDNS1123Label, "a cluster name ("+labelRule+")")
	}
	if err == nil {
		wq.Namespace, err = q.name("namespace", validation.IsDNS1123Label, "a namespace name ("+labelRule+")")
	}
	if err == nil {
		if p, ok := q["phase"]; ok && !slices.Contains(phases, v1alpha1.Phase(p)) {
			err = badParam("phase", "phase %q: must be one of %s", p, join(phases))
		}
		wq.Phase = v1alpha1.Phase(q["phase"])
	}
	if err == nil {
		wq.Limit, err = q.limit()
	}
	if c, ok := q["continue"]; err == nil && ok {
		var wc workloadCursor
		if err = decodeCursor(c, &wc); err != nil || wc.V != cursorVersion || wc.Cluster == "" {
			err = badCursor(c, cmpErr(err, errors.New("another version or an incomplete cursor")))
		} else {
			wq.After = &store.WorkloadKey{Cluster: wc.Cluster, Namespace: wc.Namespace, Kind: wc.Kind, Name: wc.Name}
		}
	}
	if err != nil {
		writeParamError(w, err)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), readTimeout)
	defer cancel()
	items, next, err := s.Store.Workloads(ctx, wq)
	if err != nil {
		s.failed(w, r, err)
		return
	}
	page := hubv1.WorkloadPage{Items: items}
	if next != nil {
		page.Continue = encodeCursor(workloadCursor{V: cursorVersion, Cluster: next.Cluster, Namespace: next.Namespace, Kind: next.Kind, Name: next.Name})
	}
	httpjson.Write(w, http.StatusOK, page)
}

func cmpErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// serveHistory answers GET /v1/workloads/{id}/history: the workload and a
// page of its actions, newest first.
func (s *Server) serveHistory(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	q, err := parseQuery(r.URL.RawQuery, "limit", "continue")
	aq := store.ActionQuery{WorkloadID: id}
	if err == nil {
		aq.Limit, err = q.limit()
	}
	if err == nil {
		aq.After, err = q.actionCursor()
	}
	if err != nil {
		writeParamError(w, err)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), readTimeout)
	defer cancel()
	wl, err := s.Store.Workload(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		httpjson.Write(w, http.StatusNotFound, auditv1.Error{Error: fmt.Sprintf("no workload has id %q; ids are in GET /v1/workloads and in each action's workloadId", id), Parameter: "id"})
		return
	}
	if err != nil {
		s.failed(w, r, err)
		return
	}
	items, next, err := s.Store.Actions(ctx, aq)
	if err != nil {
		s.failed(w, r, err)
		return
	}
	httpjson.Write(w, http.StatusOK, hubv1.WorkloadHistory{Workload: wl, Items: items, Continue: actionContinue(next)})
}

// serveClusters answers GET /v1/clusters.
func (s *Server) serveClusters(w http.ResponseWriter, r *http.Request) {
	if _, err := parseQuery(r.URL.RawQuery); err != nil {
		writeParamError(w, err)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), readTimeout)
	defer cancel()
	cs, err := s.Store.Clusters(ctx)
	if err != nil {
		s.failed(w, r, err)
		return
	}
	httpjson.Write(w, http.StatusOK, hubv1.ClusterList{Items: cs})
}
