package web

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	auditv1 "github.com/kerf-dev/kerf/api/audit/v1"
	"github.com/kerf-dev/kerf/api/v1alpha1"
)

// ErrNotFound is what a WorkloadSource returns (wrapped or not) for a
// recommendation it does not know: the page answers 404.
var ErrNotFound = errors.New("not found")

// ErrForbidden is what a Source returns (wrapped) for what the caller may
// not read, such as the apiserver's refusal of the dashboard's user: the
// page answers 403 with the error's text.
var ErrForbidden = errors.New("forbidden")

// WorkloadID names the recommendation a workload page is about. Cluster is
// empty on the leader (it knows one cluster); the hub sets it.
type WorkloadID struct {
	// Cluster is the cluster's name on the hub; empty on the leader.
	Cluster string
	// Namespace is the recommendation's namespace.
	Namespace string
	// Name is the RightsizingRecommendation's name.
	Name string
}

// WorkloadSource reads what a workload page shows. The leader's reads its
// informer cache and its usage series (cluster); the hub's reads its
// database, which holds no usage: it leaves WorkloadView.Usage empty.
type WorkloadSource interface {
	// Workload returns the view of the recommendation id names, or an
	// error wrapping ErrNotFound when there is none.
	Workload(ctx context.Context, id WorkloadID) (WorkloadView, error)
}

// WorkloadView is everything a workload page shows about one
// recommendation and its workload. Only Namespace, Recommendation,
// Workload and Phase are needed; the page says what the Source did not
// know.
type WorkloadView struct {
	// Cluster is the cluster's name; empty on the leader.
	Cluster string
	// Namespace is the recommendation's (and the workload's) namespace.
	Namespace string
	// Recommendation is the RightsizingRecommendation's name.
	Recommendation string
	// Workload is the recommendation's target.
	Workload auditv1.Workload
	// Strategy is the recommendation's spec.strategy.
	Strategy v1alpha1.Strategy
	// Phase, Reason and Message are the recommendation's status.
	Phase   v1alpha1.Phase
	Reason  string
	Message string
	// HealthWatch is the HealthWatch condition; nil when it is not set.
	HealthWatch *auditv1.HealthWatch
	// Policy is the policy that governs the workload; nil when none does
	// (PolicyError says why, when the Source knows).
	Policy *Policy
	// PolicyUnknown says the Source does not know the policies (the
	// hub): Policy nil then does not mean that none governs.
	PolicyUnknown bool
	// PolicyError says why no policy could be resolved (a broken
	// selector), or is empty.
	PolicyError string
	// ValuesUnknown says the Source keeps only the actions (the hub): it
	// does not know the values in force or the recommender's basis, so
	// empty Containers and a nil Basis then say nothing about them.
	ValuesUnknown bool
	// Containers are the values per container: the recommendation's and,
	// when known, the manifest's.
	Containers []ContainerValues
	// Basis is the recommender's basis (the
	// kerf.dev/recommendation-basis annotation); nil for a recommendation
	// the recommender did not make. BasisError says why it could not be
	// read.
	Basis      *v1alpha1.RecommendationBasis
	BasisError string
	// History are the recommendation's actions, oldest first
	// (status.history).
	History []auditv1.Entry
	// Usage is each container's usage over time, oldest point first;
	// empty when the Source keeps none (the hub).
	Usage []ContainerUsage
	// Now is the Source's clock: the chart's right edge. Zero means the
	// page's clock.
	Now time.Time
	// Unreadable says what the Source was not allowed to read (the
	// workload, the policies), a sentence each; the page lists them.
	Unreadable []string
}

// Policy is the policy that governs a workload, with its spec's defaults
// applied.
type Policy struct {
	// Kind is RightsizingPolicy, ClusterRightsizingPolicy, RollbackPolicy
	// or ClusterRollbackPolicy.
	Kind v1alpha1.PolicyKind
	// Name is the policy's name.
	Name string
	// Namespace is a namespaced policy's namespace; empty for a cluster
	// one.
	Namespace string
	// Weight is the policy's spec.weight.
	Weight int32
	// Guardrails are the policy's guardrails.
	Guardrails v1alpha1.Guardrails
	// Recommend is the policy's spec.recommend; nil when not set.
	Recommend *v1alpha1.RecommendSpec
}

// ContainerValues are one container's values: what the recommendation
// asks for and what the workload's manifest (its pod template) declares.
type ContainerValues struct {
	// Name is the container's name.
	Name string
	// Recommended are the recommendation's values; nil when it does not
	// list the container.
	Recommended *v1alpha1.Resources
	// Manifest are the pod template's values; nil when not known.
	Manifest *v1alpha1.Resources
}

// ContainerUsage is one container's usage over time, over all the
// workload's pods.
type ContainerUsage struct {
	// Container is the container's name.
	Container string
	// Step is the span a point covers when its own Step is zero.
	Step time.Duration
	// Points are the readings, oldest first.
	Points []UsagePoint
}

// UsagePoint is a container's usage over one step.
type UsagePoint struct {
	// At is the step's start.
	At time.Time
	// Step is the span the point covers; zero means its series' Step.
	// The leader's points are minutes for the newest hour and five
	// minutes before it.
	Step time.Duration
	// CPUMilli is the mean CPU rate per pod over the step, in millicores;
	// negative when not known.
	CPUMilli int64
	// MemoryBytes is the highest working set any pod reached in the step;
	// negative when not known.
	MemoryBytes int64
	// ThrottledPercent is the share of CFS periods throttled in the step
	// (0 to 100); negative when not known.
	ThrottledPercent int
	// OOMKills are the OOM kills in the step.
	OOMKills int
}

// WorkloadPage is the page of one workload: its phase, policy and
// guardrails, the recommendation in force and why, the timeline of its
// actions and a chart per container of requests and limits against usage.
// It reads the path values "cluster" (optional), "namespace" and "name"
// (register it as GET /ui/workloads/{namespace}/{name}) and the query
// parameter window (ParseWindow), and answers GET and HEAD.
type WorkloadPage struct {
	// Source reads the workload.
	Source WorkloadSource
	// Refresh is how often the page reloads itself (a meta refresh); zero
	// means never.
	Refresh time.Duration
	// ActivityHref is the Activity page's address, for the link back;
	// empty means no link.
	ActivityHref string
	// Now is the clock when the Source gives none; nil means time.Now.
	Now func() time.Time
	// Log receives the Source's read errors; nil means slog.Default().
	Log *slog.Logger
	// UsageNote says why the Source keeps no usage, under the chart's
	// title; empty says only that none is recorded.
	UsageNote string
}

// workloadPage is what workload.html renders.
type workloadPage struct {
	WorkloadView
	Found        bool
	Error        string
	Refresh      int
	ActivityHref string
	RolledBack   bool
	// Degraded shows the banner at the top: Kerf leaves the workload
	// alone until it is resumed.
	Degraded bool
	Timeline []auditv1.Entry // newest first
	Charts   []containerCharts
	// Windows are the links to the charts' time axes, the one in force
	// current.
	Windows []link
	// UsageNote is WorkloadPage.UsageNote.
	UsageNote string
	// Forbidden says the Source refused the caller.
	Forbidden bool
}

// containerCharts are one container's two panels.
type containerCharts struct {
	Name        string
	CPU, Memory *Chart
}

// Panels are the container's CPU and memory panels.
func (c containerCharts) Panels() []*Chart { return []*Chart{c.CPU, c.Memory} }

func (p *WorkloadPage) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, fmt.Sprintf("method %s: must be GET or HEAD", r.Method), http.StatusMethodNotAllowed)
		return
	}
	id := WorkloadID{Cluster: r.PathValue("cluster"), Namespace: r.PathValue("namespace"), Name: r.PathValue("name")}
	page := workloadPage{ActivityHref: p.ActivityHref, UsageNote: p.UsageNote}
	page.Namespace, page.Recommendation, page.Cluster = id.Namespace, id.Name, id.Cluster
	status := http.StatusOK
	window, err := ParseWindow(r.URL.Query().Get("window"))
	if err != nil {
		page.Error = fmt.Sprintf("The parameter window is not valid: %v.", err)
		renderPage(w, http.StatusBadRequest, "workload.html", page, p.log(), pageHeaders)
		return
	}
	view, err := p.Source.Workload(r.Context(), id)
	switch {
	case errors.Is(err, ErrNotFound):
		status, page.Error = http.StatusNotFound, fmt.Sprintf("There is no recommendation %s in namespace %s.", id.Name, id.Namespace)
	case errors.Is(err, ErrForbidden):
		status, page.Error, page.Forbidden = http.StatusForbidden, forbiddenText(err), true
	case err != nil:
		p.log().Error("workload page cannot read the workload", "namespace", id.Namespace, "name", id.Name, "err", err)
		status, page.Error = http.StatusServiceUnavailable, fmt.Sprintf("The workload cannot be read now: %v. Try again shortly.", err)
		w.Header().Set("Retry-After", "5")
	default:
		if view.Now.IsZero() {
			view.Now = p.now()
		}
		page.WorkloadView, page.Found = view, true
		page.RolledBack = view.Phase == v1alpha1.PhaseRolledBack
		page.Degraded = view.Phase == v1alpha1.PhaseDegraded
		for i := len(view.History) - 1; i >= 0; i-- {
			page.Timeline = append(page.Timeline, view.History[i])
		}
		page.Charts = buildCharts(view, window)
		for _, wd := range Windows {
			page.Windows = append(page.Windows, link{Text: wd.Text(), Href: "?window=" + string(wd), Current: wd == window})
		}
		if p.Refresh > 0 {
			page.Refresh = int(p.Refresh.Round(time.Second) / time.Second)
		}
	}
	renderPage(w, status, "workload.html", page, p.log(), pageHeaders)
}

// forbiddenText is a page's message for an error wrapping ErrForbidden.
// readFailure is a page's status and message for a failed read of what
// it shows: 400 naming a filter the source refused, 403 for credentials
// that may not read it, else 503 with Retry-After, logged.
func readFailure(w http.ResponseWriter, log *slog.Logger, page, what string, err error) (int, string) {
	var bad interface{ Parameter() string }
	switch {
	case errors.As(err, &bad):
		return http.StatusBadRequest, fmt.Sprintf("The filter %s is not valid: %v.", bad.Parameter(), err)
	case errors.Is(err, ErrForbidden):
		return http.StatusForbidden, forbiddenText(err)
	}
	log.Error(page+" page cannot read the "+what, "err", err)
	w.Header().Set("Retry-After", "5")
	return http.StatusServiceUnavailable, fmt.Sprintf("The %s cannot be read now: %v. Try again shortly.", what, err)
}

func forbiddenText(err error) string {
	return fmt.Sprintf("Forbidden: your credentials may not read this (%v). Ask for Kerf's reader role (kerf-audit-reader) in the namespace.", err)
}

func (p *WorkloadPage) now() time.Time {
	if p.Now == nil {
		return time.Now()
	}
	return p.Now()
}

func (p *WorkloadPage) log() *slog.Logger {
	if p.Log == nil {
		return slog.Default()
	}
	return p.Log
}

// Fact is a name and a value, as a page's definition list shows it.
type Fact struct {
	Name, Value string
}

// Guardrails are the policy's guardrails as facts, in the order the CRD
// documents them.
func (p *Policy) GuardrailFacts() []Fact {
	g := p.Guardrails
	r := g.Rollback
	dur := func(d *metav1.Duration) string {
		if d == nil {
			return "default"
		}
		return d.Duration.String()
	}
	count := func(n *int32) string {
		switch {
		case n == nil:
			return "default"
		case *n == 0:
			return "off"
		}
		return strconv.Itoa(int(*n))
	}
	paused := "no"
	if g.Paused {
		paused = "yes: no change is applied"
	}
	facts := []Fact{{"Paused", paused}}
	if len(g.FreezeWindows) == 0 {
		facts = append(facts, Fact{"Freeze windows", "none"})
	}
	for i, w := range g.FreezeWindows {
		facts = append(facts, Fact{fmt.Sprintf("Freeze window %d", i+1), fmt.Sprintf("%s for %s (%s)", w.Schedule, w.Duration.Duration, w.TimeZone)})
	}
	ratio := r.ThrottlingRatio
	if ratio == "" {
		ratio = "default"
	}
	restore := string(r.RestoreTo)
	if restore == "" {
		restore = "default"
	}
	facts = append(facts,
		Fact{"Health watch", dur(r.WatchDuration)},
		Fact{"OOM kills that roll memory back", count(r.OOMKills)},
		Fact{"Restarts that roll back", count(r.Restarts)},
		Fact{"Throttling ratio that rolls CPU back", ratio},
		Fact{"Cooldown after a rollback", dur(r.Cooldown)},
		Fact{"Restores", restore},
		Fact{"Adoption threshold", fmt.Sprintf("%d%%", r.AdoptionThresholdPercent)},
		Fact{"Unschedulable grace", dur(r.UnschedulableGrace)},
		Fact{"Backoff", backoff(r.Backoff, dur)},
	)
	return facts
}

func backoff(b v1alpha1.Backoff, dur func(*metav1.Duration) string) string {
	if b.TimePeriod == nil && b.MultiplyByTurn == 0 && b.MaxAttempts == 0 {
		return "default"
	}
	return fmt.Sprintf("turn n backs off %s × %d × n; %d attempt(s)", dur(b.TimePeriod), b.MultiplyByTurn, b.MaxAttempts)
}

// RecommendFacts are the policy's spec.recommend as facts; nil when the
// recommender is not enabled.
func (p *Policy) RecommendFacts() []Fact {
	rc := p.Recommend
	if rc == nil || !rc.Enabled {
		return nil
	}
	pct := func(n *int32) string {
		if n == nil {
			return "default"
		}
		return fmt.Sprintf("%d%%", *n)
	}
	dur := func(d *metav1.Duration) string {
		if d == nil {
			return "default"
		}
		return d.Duration.String()
	}
	strategy := string(rc.Strategy)
	if strategy == "" {
		strategy = "default"
	}
	return []Fact{
		{"Strategy", strategy}, {"Interval", dur(rc.Interval)}, {"Minimum history", dur(rc.MinHistory)},
		{"Minimum change", pct(rc.MinChangePercent)}, {"CPU percentile", pct(rc.CPUPercentile)},
		{"Memory percentile", pct(rc.MemoryPercentile)}, {"Safety margin", pct(rc.SafetyMarginPercent)},
	}
}

// values writes a container's requests or limits as "cpu 250m, memory
// 128Mi", or "none".
func values(v *v1alpha1.ResourceValues) string {
	if v == nil || (v.CPU == nil && v.Memory == nil) {
		return "none"
	}
	var parts []string
	if v.CPU != nil {
		parts = append(parts, "cpu "+quantity(v.CPU))
	}
	if v.Memory != nil {
		parts = append(parts, "memory "+quantity(v.Memory))
	}
	return strings.Join(parts, ", ")
}

// RecommendedRequests and the methods below write a container's values
// for the page: "cpu 250m, memory 128Mi", "none" or "not known".
func (c ContainerValues) RecommendedRequests() string { return requestsOf(c.Recommended) }

// RecommendedLimits are the recommendation's limits.
func (c ContainerValues) RecommendedLimits() string { return limitsOf(c.Recommended) }

// ManifestRequests are the manifest's requests.
func (c ContainerValues) ManifestRequests() string { return requestsOf(c.Manifest) }

// ManifestLimits are the manifest's limits.
func (c ContainerValues) ManifestLimits() string { return limitsOf(c.Manifest) }

func requestsOf(r *v1alpha1.Resources) string {
	if r == nil {
		return "not known"
	}
	return values(r.Requests)
}

func limitsOf(r *v1alpha1.Resources) string {
	if r == nil {
		return "not known"
	}
	return values(r.Limits)
}

// basisTarget is a container's estimate before the latches and guards,
// as "cpu 250m, memory 128Mi" (the template's target).
func basisTarget(c v1alpha1.ContainerBasis) string {
	return "cpu " + formatValue(v1alpha1.ResourceCPU, float64(c.TargetCPUMilli)) + ", memory " + formatValue(v1alpha1.ResourceMemory, float64(c.TargetMemoryBytes))
}

// basisParameters are the estimators' parameters, as percentages (the
// template's parameters).
func basisParameters(b *v1alpha1.RecommendationBasis) string {
	return fmt.Sprintf("CPU percentile %s, memory percentile %s, safety margin %s", percent(b.CPUPercentile), percent(b.MemoryPercentile), percent(b.SafetyMargin))
}

func percent(f float64) string { return strconv.FormatFloat(math.Round(f*1000)/10, 'f', -1, 64) + "%" }
