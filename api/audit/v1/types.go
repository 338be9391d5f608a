// Package auditv1 is the JSON contract of Kerf's audit API: the actions Kerf
// took on workloads, as the leader serves them (cluster/audit,
// docs/audit-api.md) and as the hub serves every cluster's (hub,
// docs/hub.md, which adds the cluster through api/hub/v1). Both sides import
// these types so that one JSON shape serves both; neither imports the other.
package auditv1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kerf-dev/kerf/api/v1alpha1"
)

// Workload names the workload a recommendation targets.
type Workload struct {
	// Kind is Deployment, StatefulSet or DaemonSet.
	Kind v1alpha1.WorkloadKind `json:"kind"`
	// Name is the workload's name.
	Name string `json:"name"`
}

// Entry is one action of status.history with the recommendation and the
// workload it belongs to. Lists are empty, never null; refusals, on
// refused actions only, is left out when there are none.
type Entry struct {
	// Time is when the action happened (RFC 3339, UTC, whole seconds).
	Time metav1.Time `json:"time"`
	// Type is applied, rolled_back, failed, healthy, blocked, refused or
	// resumed.
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
	// Refusals are the values the recommender held back, with their
	// figures; only refused actions have them, and the field is left out
	// of the others (so an action's JSON, and the hub's digest of it, is
	// the same as before refused actions existed).
	Refusals []v1alpha1.Refusal `json:"refusals,omitempty"`
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

// Error is the body of every answer that is not 200, on the leader and on
// the hub.
type Error struct {
	// Error says what went wrong; for bad input it names the parameter and
	// the allowed values.
	Error string `json:"error"`
	// Parameter is the query or path parameter at fault, if one is.
	Parameter string `json:"parameter,omitempty"`
	// Field is the request body's field at fault, if one is (the hub's
	// write API; the leader's read-only API never sets it).
	Field string `json:"field,omitempty"`
}
