package audit

import (
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
	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/cluster/workload"
)

// Limits of one page of GET /v1/audit.
const (
	// DefaultLimit is the page size when the limit parameter is absent.
	DefaultLimit = 100
	// MaxLimit is the largest limit accepted.
	MaxLimit = 1000
)

// actionTypes are the action types in the order error messages list them.
var actionTypes = v1alpha1.ActionTypes

// auditParams are the query parameters of GET /v1/audit, in the order
// error messages list them.
var auditParams = []string{"type", "reason", "namespace", "since", "limit", "continue"}

// paramError is bad input in one parameter.
type paramError struct {
	param string
	msg   string
}

func (e *paramError) Error() string { return e.msg }

// Parameter names the query parameter at fault, so that a caller of
// Handler.Audit (the web pages) can tell bad input from a failed read.
func (e *paramError) Parameter() string { return e.param }

func badParam(param, format string, args ...any) error {
	return &paramError{param: param, msg: fmt.Sprintf(format, args...)}
}

// auditQuery is a parsed GET /v1/audit query.
type auditQuery struct {
	types     map[v1alpha1.ActionType]bool // empty: every type
	reason    string
	namespace string
	since     time.Time // zero: no lower bound
	limit     int
	after     *position // the previous page's last entry
}

func (q *auditQuery) matches(a *v1alpha1.Action) bool {
	return (len(q.types) == 0 || q.types[a.Type]) &&
		(q.reason == "" || a.Reason == q.reason) &&
		(q.since.IsZero() || !a.Time.Time.Before(q.since))
}

// parseAuditQuery parses and checks a GET /v1/audit query. An empty value
// counts as absent, so that an HTML form's empty fields select everything.
func parseAuditQuery(vals url.Values, now time.Time) (*auditQuery, error) {
	var err error
	for _, k := range slices.Sorted(maps.Keys(vals)) {
		if !slices.Contains(auditParams, k) {
			return nil, badParam(k, "unknown query parameter %q: must be one of %s", k, strings.Join(auditParams, ", "))
		}
	}
	q := &auditQuery{limit: DefaultLimit}
	for _, v := range vals["type"] {
		for t := range strings.SplitSeq(v, ",") {
			t = strings.TrimSpace(t)
			if t == "" {
				continue
			}
			if !slices.Contains(actionTypes, v1alpha1.ActionType(t)) {
				return nil, badParam("type", "type %q: must be one of %s", t, join(actionTypes))
			}
			if q.types == nil {
				q.types = map[v1alpha1.ActionType]bool{}
			}
			q.types[v1alpha1.ActionType(t)] = true
		}
	}
	single := func(name string) (string, error) {
		var got []string
		for _, v := range vals[name] {
			if v != "" {
				got = append(got, v)
			}
		}
		if len(got) > 1 {
			return "", badParam(name, "%s: give it once, not %d times", name, len(got))
		}
		if len(got) == 0 {
			return "", nil
		}
		return got[0], nil
	}
	if q.reason, err = single("reason"); err != nil {
		return nil, err
	}
	if q.namespace, err = single("namespace"); err != nil {
		return nil, err
	}
	if q.namespace != "" && len(validation.IsDNS1123Label(q.namespace)) > 0 {
		return nil, badParam("namespace", "namespace %q: must be a namespace name (lower-case letters, digits and '-', at most 63)", q.namespace)
	}
	since, err := single("since")
	if err != nil {
		return nil, err
	}
	if since != "" {
		if q.since, err = parseSince(since, now); err != nil {
			return nil, err
		}
	}
	limit, err := single("limit")
	if err != nil {
		return nil, err
	}
	if limit != "" {
		n, err := strconv.Atoi(limit)
		if err != nil || n < 1 || n > MaxLimit {
			return nil, badParam("limit", "limit %q: must be a whole number from 1 to %d", limit, MaxLimit)
		}
		q.limit = n
	}
	cont, err := single("continue")
	if err != nil {
		return nil, err
	}
	if cont != "" {
		p, err := decodePosition(cont)
		if err != nil {
			return nil, badParam("continue", "continue %q: not a cursor of this API (%v); pass the previous page's \"continue\" value unchanged", cont, err)
		}
		q.after = &p
	}
	return q, nil
}

// parseSince reads an RFC 3339 timestamp, or a Go duration that counts back
// from now.
func parseSince(s string, now time.Time) (time.Time, error) {
	if d, err := time.ParseDuration(s); err == nil {
		if d < 0 {
			return time.Time{}, badParam("since", "since %q: must be an RFC 3339 timestamp (2006-01-02T15:04:05Z) or a duration back from now (90s, 15m, 1h30m), not negative", s)
		}
		return now.Add(-d), nil
	}
	// An unescaped '+' of a zone offset arrives as a space.
	for _, v := range []string{s, strings.ReplaceAll(s, " ", "+")} {
		if t, err := time.Parse(time.RFC3339, v); err == nil {
			return t, nil
		}
	}
	return time.Time{}, badParam("since", "since %q: must be an RFC 3339 timestamp (2006-01-02T15:04:05Z) or a duration back from now (90s, 15m, 1h30m)", s)
}

// parseWorkloadPath reads and checks the path parameters of
// GET /v1/workloads/{namespace}/{kind}/{name}/history.
func parseWorkloadPath(r *http.Request) (auditv1.Workload, string, error) {
	ns, kind, name := r.PathValue("namespace"), r.PathValue("kind"), r.PathValue("name")
	if len(validation.IsDNS1123Label(ns)) > 0 {
		return auditv1.Workload{}, "", badParam("namespace", "namespace %q: must be a namespace name (lower-case letters, digits and '-', at most 63)", ns)
	}
	wl := auditv1.Workload{Name: name}
	for _, k := range workload.Kinds {
		if strings.EqualFold(kind, string(k)) {
			wl.Kind = k
		}
	}
	if wl.Kind == "" {
		return auditv1.Workload{}, "", badParam("kind", "kind %q: must be one of %s (any case)", kind, join(workload.Kinds))
	}
	if len(validation.IsDNS1123Subdomain(name)) > 0 {
		return auditv1.Workload{}, "", badParam("name", "name %q: must be a workload name (lower-case letters, digits, '-' and '.', at most 253)", name)
	}
	return wl, ns, nil
}

// noQuery refuses query parameters where an endpoint takes none.
func noQuery(raw string) error {
	vals, err := url.ParseQuery(raw)
	if err != nil {
		return fmt.Errorf("query %q: %w", raw, err)
	}
	for _, k := range slices.Sorted(maps.Keys(vals)) {
		return badParam(k, "unknown query parameter %q: this endpoint takes none", k)
	}
	return nil
}

func join[T ~string](s []T) string {
	parts := make([]string, len(s))
	for i, v := range s {
		parts[i] = string(v)
	}
	return strings.Join(parts, ", ")
}
