// Package audit serves the leader's audit HTTP API: every action Kerf took
// on a workload, as JSON, newest first.
//
// docs/design.md section 7 asks for it; docs/audit-api.md describes the
// endpoints. It reads the actions from the status.history of the
// RightsizingRecommendations, and never writes. It limits each answer to
// the namespaces the caller may read, asking the Authorizer's
// SubjectAccessReviews (access.go). Pages and their continue tokens keep
// one order across trims of the history (order.go).
package audit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	auditv1 "github.com/kerf-dev/kerf/api/audit/v1"
	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/internal/httpjson"
)

// Handler serves the audit API from RightsizingRecommendation status.
type Handler struct {
	// Reader reads RightsizingRecommendations; the leader passes its cache.
	// The handler never changes what it reads.
	Reader client.Reader
	// Now is the clock that a `since` duration counts back from; nil means
	// time.Now.
	Now func() time.Time
	// Log receives the errors of reading recommendations; nil means
	// slog.Default().
	Log *slog.Logger
	// Authorizer, when set, limits every answer to the namespaces where
	// the caller may list RightsizingRecommendations. The caller is
	// authn.UserFrom of the request's context: the handler is served
	// behind authn's Authenticated. One cluster-wide review comes first;
	// if allowed, nothing is filtered, else there is one review per
	// namespace. A request naming a namespace the caller may not read
	// gets 403. A list across namespaces leaves the others out before
	// paging, so pages and cursors stay right. Nil authorizes nothing, for
	// tests of the queries alone.
	Authorizer Authorizer
}

// New returns a Handler that reads recommendations from r.
func New(r client.Reader) *Handler {
	return &Handler{Reader: r, Now: time.Now}
}

// Register adds the API's two routes to mux: GET /v1/audit and
// GET /v1/workloads/{namespace}/{kind}/{name}/history (HEAD too). Other
// methods on them get a JSON 405.
func (h *Handler) Register(mux *http.ServeMux) {
	const audit, history = "/v1/audit", "/v1/workloads/{namespace}/{kind}/{name}/history"
	mux.HandleFunc("GET "+audit, h.serveAudit)
	mux.HandleFunc("GET "+history, h.serveWorkloadHistory)
	mux.HandleFunc(audit, methodNotAllowed)
	mux.HandleFunc(history, methodNotAllowed)
}

func methodNotAllowed(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Allow", "GET, HEAD")
	httpjson.Write(w, http.StatusMethodNotAllowed, auditv1.Error{Error: fmt.Sprintf("method %s: must be GET or HEAD", r.Method)})
}

func (h *Handler) serveAudit(w http.ResponseWriter, r *http.Request) {
	vals, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		writeError(w, http.StatusBadRequest, fmt.Errorf("query %q: %w", r.URL.RawQuery, err))
		return
	}
	page, err := h.Audit(r.Context(), vals)
	if _, ok := errors.AsType[*paramError](err); ok {
		writeError(w, http.StatusBadRequest, err)
		return
	}
	if err != nil && writeAccessError(w, err) {
		return
	}
	if err != nil {
		h.readFailed(w, err)
		return
	}
	httpjson.Write(w, http.StatusOK, page)
}

// Audit returns the page of actions that query selects, newest first: the
// answer of GET /v1/audit. query holds its parameters: type, reason,
// namespace, since, limit, continue. The JSON API and the web pages (web)
// both read through it, so they show the same actions in the same order.
// It returns:
//   - for bad input, an error with a Parameter method naming the
//     parameter at fault;
//   - for a namespace the caller may not read (Authorizer), an error that
//     says so;
//   - for a failed read of the recommendations, the read's error.
func (h *Handler) Audit(ctx context.Context, query url.Values) (auditv1.Page, error) {
	q, err := parseAuditQuery(query, h.now())
	if err != nil {
		return auditv1.Page{}, err
	}
	sc, err := h.scopeOf(ctx)
	if err != nil {
		return auditv1.Page{}, err
	}
	if q.namespace != "" {
		if err := sc.require(ctx, q.namespace); err != nil {
			return auditv1.Page{}, err
		}
	}
	rsrs, err := h.list(ctx)
	if err != nil {
		return auditv1.Page{}, err
	}
	// The page and one more, to know whether another page follows.
	first := &firstRefs{n: q.limit + 1, refs: make([]ref, 0, q.limit+1)}
	seen := map[instant]int{}
	for i := range rsrs {
		rsr := &rsrs[i]
		if q.namespace != "" && rsr.Namespace != q.namespace {
			continue
		}
		if ok, err := sc.may(ctx, rsr.Namespace); err != nil {
			return auditv1.Page{}, err
		} else if !ok {
			continue
		}
		eachRef(rsr, func(a *v1alpha1.Action, p position) bool {
			return q.matches(a) && (q.after == nil || p.compare(*q.after) > 0)
		}, first.add, seen)
	}
	refs := first.sorted()
	page := auditv1.Page{Items: make([]auditv1.Entry, 0, min(len(refs), q.limit))}
	for _, rf := range refs[:min(len(refs), q.limit)] {
		page.Items = append(page.Items, rf.entry())
	}
	if len(refs) > q.limit {
		page.Continue = refs[q.limit-1].pos.encode()
	}
	return page, nil
}

func (h *Handler) serveWorkloadHistory(w http.ResponseWriter, r *http.Request) {
	wl, ns, err := parseWorkloadPath(r)
	if err == nil {
		err = noQuery(r.URL.RawQuery)
	}
	if err != nil {
		writeError(w, http.StatusBadRequest, err)
		return
	}
	// Authorized before anything is read: a namespace the caller may not
	// read gets 403 whether or not the workload exists there.
	sc, err := h.scopeOf(r.Context())
	if err == nil {
		err = sc.require(r.Context(), ns)
	}
	if err != nil {
		writeAccessError(w, err)
		return
	}
	rsrs, err := h.list(r.Context())
	if err != nil {
		h.readFailed(w, err)
		return
	}
	out := auditv1.WorkloadHistory{Namespace: ns, Workload: wl, Recommendations: []auditv1.RecommendationStatus{}, Items: []auditv1.Entry{}}
	var refs []ref
	for i := range rsrs {
		rsr := &rsrs[i]
		if rsr.Namespace != ns || rsr.Spec.TargetRef.Kind != wl.Kind || rsr.Spec.TargetRef.Name != wl.Name {
			continue
		}
		out.Recommendations = append(out.Recommendations, statusOf(rsr))
		refs = appendRefs(refs, rsr, nil)
	}
	if len(out.Recommendations) == 0 {
		httpjson.Write(w, http.StatusNotFound, auditv1.Error{Error: fmt.Sprintf("no RightsizingRecommendation targets %s %s/%s", wl.Kind, ns, wl.Name)})
		return
	}
	slices.SortFunc(out.Recommendations, func(a, b auditv1.RecommendationStatus) int { return strings.Compare(a.Name, b.Name) })
	sortRefs(refs)
	for _, rf := range refs {
		out.Items = append(out.Items, rf.entry())
	}
	httpjson.Write(w, http.StatusOK, out)
}

// list reads every recommendation the reader holds. It lists all namespaces
// and filters afterwards: a leader's cache limited to some namespaces
// refuses a list of any other, which has no actions to show anyway.
func (h *Handler) list(ctx context.Context) ([]v1alpha1.RightsizingRecommendation, error) {
	var list v1alpha1.RightsizingRecommendationList
	// The objects are only read, so the cache's own copies will do.
	if err := h.Reader.List(ctx, &list, client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("list RightsizingRecommendations: %w", err)
	}
	return list.Items, nil
}

func (h *Handler) readFailed(w http.ResponseWriter, err error) {
	log := h.Log
	if log == nil {
		log = slog.Default()
	}
	log.Error("audit API cannot read recommendations", "err", err)
	status := http.StatusInternalServerError
	if _, ok := errors.AsType[*cache.ErrCacheNotStarted](err); ok {
		status = http.StatusServiceUnavailable
		w.Header().Set("Retry-After", "5")
	}
	httpjson.Write(w, status, auditv1.Error{Error: err.Error()})
}

func (h *Handler) now() time.Time {
	if h.Now == nil {
		return time.Now()
	}
	return h.Now()
}

func statusOf(rsr *v1alpha1.RightsizingRecommendation) auditv1.RecommendationStatus {
	s := auditv1.RecommendationStatus{
		Name:    rsr.Name,
		Phase:   rsr.Status.Phase,
		Reason:  rsr.Status.Reason,
		Message: rsr.Status.Message,
	}
	if c := meta.FindStatusCondition(rsr.Status.Conditions, v1alpha1.ConditionHealthWatch); c != nil {
		s.HealthWatch = &auditv1.HealthWatch{Reason: c.Reason, Message: c.Message}
	}
	if c := rsr.Status.Change; c != nil {
		s.Change = &auditv1.ChangeSummary{AppliedAt: c.AppliedAt, Strategy: c.Strategy, Resources: auditv1.NonNil(c.Resources)}
	}
	return s
}

func writeError(w http.ResponseWriter, status int, err error) {
	body := auditv1.Error{Error: err.Error()}
	if pe, ok := errors.AsType[*paramError](err); ok {
		body.Parameter = pe.param
	}
	httpjson.Write(w, status, body)
}
