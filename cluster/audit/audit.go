// Package audit serves the leader's audit HTTP API (docs/design.md section
// 7): every action Kerf took on a workload, read from the status.history of
// the RightsizingRecommendations, as JSON, newest first. It reads, never
// writes; docs/audit-api.md describes the endpoints.
package audit

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kerf-dev/kerf/api/v1alpha1"
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
	writeJSON(w, http.StatusMethodNotAllowed, Error{Error: fmt.Sprintf("method %s: must be GET or HEAD", r.Method)})
}

// Workload names the workload a recommendation targets.
type Workload struct {
	// Kind is Deployment, StatefulSet or DaemonSet.
	Kind v1alpha1.WorkloadKind `json:"kind"`
	// Name is the workload's name.
	Name string `json:"name"`
}

// Entry is one action of status.history with the recommendation and the
// workload it belongs to. Lists are empty, never null.
type Entry struct {
	// Time is when the action happened (RFC 3339, UTC, whole seconds).
	Time metav1.Time `json:"time"`
	// Type is applied, rolled_back, failed, healthy or blocked.
	Type v1alpha1.ActionType `json:"type"`
	// Reason is a CamelCase word, such as OOMKills or Cooldown.
	Reason string `json:"reason"`
	// Message says what happened, for people.
	Message string `json:"message"`
	// Resources are the resources the action touched: cpu, memory.
	Resources []v1alpha1.ResourceName `json:"resources"`
	// Containers are the old and new values per container.
	Containers []v1alpha1.ContainerValueChange `json:"containers"`
	// Figures are the figures that crossed a threshold.
	Figures []string `json:"figures"`
	// Namespace is the recommendation's (and the workload's) namespace.
	Namespace string `json:"namespace"`
	// Recommendation is the RightsizingRecommendation's name.
	Recommendation string `json:"recommendation"`
	// Workload is the recommendation's target.
	Workload Workload `json:"workload"`
}

// Page is the answer of GET /v1/audit.
type Page struct {
	// Items are the actions, newest first.
	Items []Entry `json:"items"`
	// Continue fetches the next page when passed as the continue query
	// parameter; empty on the last page.
	Continue string `json:"continue"`
}

// HealthWatch is a recommendation's HealthWatch condition.
type HealthWatch struct {
	// Reason is the watch's state, such as Watching, Healthy or OOMKills.
	Reason string `json:"reason"`
	// Message says the same for people.
	Message string `json:"message"`
}

// ChangeSummary sums up a recommendation's status.change: the change being
// watched, or the last one.
type ChangeSummary struct {
	// AppliedAt is when the change was applied.
	AppliedAt metav1.Time `json:"appliedAt"`
	// Strategy is the strategy that applied it.
	Strategy v1alpha1.Strategy `json:"strategy"`
	// Resources are the resources it touched.
	Resources []v1alpha1.ResourceName `json:"resources"`
}

// RecommendationStatus is where one recommendation targeting a workload
// stands now.
type RecommendationStatus struct {
	// Name is the RightsizingRecommendation's name.
	Name string `json:"name"`
	// Phase is the recommendation's phase; empty before Kerf acted on it.
	Phase v1alpha1.Phase `json:"phase"`
	// Reason says why the phase is what it is.
	Reason string `json:"reason"`
	// Message says the same for people.
	Message string `json:"message"`
	// HealthWatch is the HealthWatch condition; null when it is not set.
	HealthWatch *HealthWatch `json:"healthWatch"`
	// Change is the status.change summary; null when nothing was applied.
	Change *ChangeSummary `json:"change"`
}

// WorkloadHistory is the answer of
// GET /v1/workloads/{namespace}/{kind}/{name}/history.
type WorkloadHistory struct {
	// Namespace is the workload's namespace.
	Namespace string `json:"namespace"`
	// Workload is the workload, its kind spelled as Kubernetes does.
	Workload Workload `json:"workload"`
	// Recommendations are the recommendations that target the workload,
	// by name.
	Recommendations []RecommendationStatus `json:"recommendations"`
	// Items are their actions, newest first.
	Items []Entry `json:"items"`
}

// Error is the body of every answer that is not 200.
type Error struct {
	// Error says what went wrong; for bad input it names the parameter and
	// the allowed values.
	Error string `json:"error"`
	// Parameter is the query or path parameter at fault, if one is.
	Parameter string `json:"parameter,omitempty"`
}

func (h *Handler) serveAudit(w http.ResponseWriter, r *http.Request) {
	q, err := parseAuditQuery(r.URL.RawQuery, h.now())
	if err != nil {
		writeError(w, http.StatusBadRequest, err)
		return
	}
	rsrs, err := h.list(r)
	if err != nil {
		h.readFailed(w, err)
		return
	}
	var refs []ref
	for i := range rsrs {
		rsr := &rsrs[i]
		if q.namespace != "" && rsr.Namespace != q.namespace {
			continue
		}
		refs = appendRefs(refs, rsr, func(a *v1alpha1.Action, p position) bool {
			return q.matches(a) && (q.after == nil || p.compare(*q.after) > 0)
		})
	}
	sortRefs(refs)
	page := Page{Items: make([]Entry, 0, min(len(refs), q.limit))}
	for _, rf := range refs[:min(len(refs), q.limit)] {
		page.Items = append(page.Items, rf.entry())
	}
	if len(refs) > q.limit {
		page.Continue = refs[q.limit-1].pos.encode()
	}
	writeJSON(w, http.StatusOK, page)
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
	rsrs, err := h.list(r)
	if err != nil {
		h.readFailed(w, err)
		return
	}
	out := WorkloadHistory{Namespace: ns, Workload: wl, Recommendations: []RecommendationStatus{}, Items: []Entry{}}
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
		writeJSON(w, http.StatusNotFound, Error{Error: fmt.Sprintf("no RightsizingRecommendation targets %s %s/%s", wl.Kind, ns, wl.Name)})
		return
	}
	slices.SortFunc(out.Recommendations, func(a, b RecommendationStatus) int { return strings.Compare(a.Name, b.Name) })
	sortRefs(refs)
	for _, rf := range refs {
		out.Items = append(out.Items, rf.entry())
	}
	writeJSON(w, http.StatusOK, out)
}

// list reads every recommendation the reader holds. It lists all namespaces
// and filters afterwards: a leader's cache limited to some namespaces
// refuses a list of any other, which has no actions to show anyway.
func (h *Handler) list(r *http.Request) ([]v1alpha1.RightsizingRecommendation, error) {
	var list v1alpha1.RightsizingRecommendationList
	// The objects are only read, so the cache's own copies will do.
	if err := h.Reader.List(r.Context(), &list, client.UnsafeDisableDeepCopy); err != nil {
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
	writeJSON(w, status, Error{Error: err.Error()})
}

func (h *Handler) now() time.Time {
	if h.Now == nil {
		return time.Now()
	}
	return h.Now()
}

func statusOf(rsr *v1alpha1.RightsizingRecommendation) RecommendationStatus {
	s := RecommendationStatus{
		Name:    rsr.Name,
		Phase:   rsr.Status.Phase,
		Reason:  rsr.Status.Reason,
		Message: rsr.Status.Message,
	}
	if c := meta.FindStatusCondition(rsr.Status.Conditions, v1alpha1.ConditionHealthWatch); c != nil {
		s.HealthWatch = &HealthWatch{Reason: c.Reason, Message: c.Message}
	}
	if c := rsr.Status.Change; c != nil {
		s.Change = &ChangeSummary{AppliedAt: c.AppliedAt, Strategy: c.Strategy, Resources: nonNil(c.Resources)}
	}
	return s
}

// writeJSON writes v with status; HTML characters are left as they are
// (the body is never HTML, and figures hold ≥ and <).
func writeJSON(w http.ResponseWriter, status int, v any) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		status = http.StatusInternalServerError
		buf.Reset()
		_ = enc.Encode(Error{Error: "encode answer: " + err.Error()})
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

func writeError(w http.ResponseWriter, status int, err error) {
	body := Error{Error: err.Error()}
	if pe, ok := errors.AsType[*paramError](err); ok {
		body.Parameter = pe.param
	}
	writeJSON(w, status, body)
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}
