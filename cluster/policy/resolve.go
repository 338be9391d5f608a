package policy

import (
	"cmp"
	"errors"
	"fmt"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/kerf-dev/kerf/api/v1alpha1"
)

// Workload is what policy resolution needs to know of a Deployment,
// StatefulSet or DaemonSet.
type Workload struct {
	// Kind is the workload's kind.
	Kind v1alpha1.WorkloadKind
	// Namespace is the workload's namespace.
	Namespace string
	// Name is the workload's name.
	Name string
	// Labels are the workload's own labels (not its pod template's).
	Labels map[string]string
}

// Resolved is the policy chosen for a workload.
type Resolved struct {
	// Ref names the policy and carries its fingerprint, as recorded in the
	// recommendation's status.policy.
	Ref v1alpha1.PolicyReference
	// Namespace is a namespaced policy's namespace; empty for a cluster
	// one.
	Namespace string
	// Spec is a copy of the policy's spec with SetDefaults applied; a
	// rollback kind's, turned into a PolicySpec by FromRollbackPolicy.
	Spec v1alpha1.PolicySpec
}

// candidate is a policy of any of the four kinds, as ranking sees it. A
// rollback kind's spec is already turned into a PolicySpec
// (FromRollbackPolicy).
type candidate struct {
	kind    v1alpha1.PolicyKind
	ns      string
	name    string
	created metav1.Time
	spec    *v1alpha1.PolicySpec
}

// label names the policy the way kubectl users know it, for errors.
func (c candidate) label() string {
	if c.kind.Namespaced() {
		return fmt.Sprintf("%s %s/%s", c.kind, c.ns, c.name)
	}
	return fmt.Sprintf("%s %s", c.kind, c.name)
}

// Resolve chooses the RightsizingPolicy or ClusterRightsizingPolicy that
// governs w (docs/design.md section 2); Policies.Resolve chooses among the
// four kinds with the same rules. It returns nil, nil when none selects w.
// The workload's changes are then not applied, watched or rolled back:
// phase Blocked, reason NoPolicy.
//
// A namespaced policy selects only in its own namespace. Admission
// refuses a namespaceSelector on it, and one set anyway is ignored. A
// cluster policy's namespaceSelector is matched against namespaceLabels.
// The workloadSelector is matched against w.Labels, and kinds, when not
// empty, must list w.Kind. A nil selector matches everything. Policies
// being deleted do not count.
//
// The ranking is rank's: weight, then scope, then kind, then age.
//
// A selector that does not parse, on a policy that ranks above the one
// that would win, is an error naming the policy and the field. Resolve
// then chooses nothing rather than let a weaker policy govern in the
// broken one's place. Broken policies ranked below the winner do not
// matter.
func Resolve(w Workload, namespaceLabels map[string]string, namespaced []v1alpha1.RightsizingPolicy, cluster []v1alpha1.ClusterRightsizingPolicy) (*Resolved, error) {
	return choose(w, namespaceLabels, rightsizingCandidates(w, namespaced, cluster))
}

// rightsizingCandidates are the RightsizingPolicies of w's namespace and
// the ClusterRightsizingPolicies, those being deleted left out.
func rightsizingCandidates(w Workload, namespaced []v1alpha1.RightsizingPolicy, cluster []v1alpha1.ClusterRightsizingPolicy) []candidate {
	var cands []candidate
	for i := range namespaced {
		p := &namespaced[i]
		if p.DeletionTimestamp != nil || p.Namespace != w.Namespace {
			continue
		}
		cands = append(cands, candidate{v1alpha1.PolicyKindNamespaced, p.Namespace, p.Name, p.CreationTimestamp, &p.Spec})
	}
	for i := range cluster {
		p := &cluster[i]
		if p.DeletionTimestamp != nil {
			continue
		}
		cands = append(cands, candidate{v1alpha1.PolicyKindCluster, "", p.Name, p.CreationTimestamp, &p.Spec})
	}
	return cands
}

// rollbackCandidates are the RollbackPolicies of w's namespace and the
// ClusterRollbackPolicies, those being deleted left out, each spec turned
// into a PolicySpec.
func rollbackCandidates(w Workload, namespaced []v1alpha1.RollbackPolicy, cluster []v1alpha1.ClusterRollbackPolicy) []candidate {
	var cands []candidate
	for i := range namespaced {
		p := &namespaced[i]
		if p.DeletionTimestamp != nil || p.Namespace != w.Namespace {
			continue
		}
		spec := FromRollbackPolicy(&p.Spec)
		cands = append(cands, candidate{v1alpha1.PolicyKindRollback, p.Namespace, p.Name, p.CreationTimestamp, &spec})
	}
	for i := range cluster {
		p := &cluster[i]
		if p.DeletionTimestamp != nil {
			continue
		}
		spec := FromRollbackPolicy(&p.Spec)
		cands = append(cands, candidate{v1alpha1.PolicyKindClusterRollback, "", p.Name, p.CreationTimestamp, &spec})
	}
	return cands
}

// choose ranks cands and returns the best one that selects w, as Resolve
// describes.
func choose(w Workload, namespaceLabels map[string]string, cands []candidate) (*Resolved, error) {
	best, err := pick(w, namespaceLabels, cands)
	if best == nil || err != nil {
		return nil, err
	}
	return best.resolved(), nil
}

// pick ranks cands and returns the best one that selects w, nil when none
// does.
func pick(w Workload, namespaceLabels map[string]string, cands []candidate) (*candidate, error) {
	slices.SortFunc(cands, rank)

	var errs []error
	for i := range cands {
		ok, err := selects(cands[i], w, namespaceLabels)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if ok {
			if len(errs) > 0 {
				break
			}
			return &cands[i], nil
		}
	}
	return nil, errors.Join(errs...)
}

// resolved is the candidate as Resolve returns it: a defaulted copy of
// its spec and its fingerprint.
func (c *candidate) resolved() *Resolved {
	spec := c.spec.DeepCopy()
	spec.SetDefaults()
	return &Resolved{
		Ref:       v1alpha1.PolicyReference{Kind: c.kind, Name: c.name, Fingerprint: Fingerprint(*spec)},
		Namespace: c.ns,
		Spec:      *spec,
	}
}

// rank orders candidates best first (docs/design.md section 2, docs/api.md):
//  1. weight, highest first;
//  2. a namespaced policy before a cluster one, so a team's RollbackPolicy
//     beats the shipped ClusterRightsizingPolicy "default";
//  3. Kerf's own kind before the backoff design's, at equal scope;
//  4. the oldest, then the name that sorts first.
func rank(a, b candidate) int {
	if c := cmp.Compare(b.spec.Weight, a.spec.Weight); c != 0 {
		return c
	}
	if an, bn := a.kind.Namespaced(), b.kind.Namespaced(); an != bn {
		if an {
			return -1
		}
		return 1
	}
	if ar, br := a.kind.Rollback(), b.kind.Rollback(); ar != br {
		if br {
			return -1
		}
		return 1
	}
	if c := a.created.Time.Compare(b.created.Time); c != 0 {
		return c
	}
	return cmp.Compare(a.name, b.name)
}

// selects reports whether c's selector picks w. Parts are checked in the
// order kinds, namespaces, workload labels, so a broken selector only
// matters on a policy that could still select w.
func selects(c candidate, w Workload, namespaceLabels map[string]string) (bool, error) {
	sel := c.spec.Selector
	if len(sel.Kinds) > 0 && !slices.Contains(sel.Kinds, w.Kind) {
		return false, nil
	}
	if !c.kind.Namespaced() {
		ok, err := matches(sel.NamespaceSelector, namespaceLabels)
		if err != nil {
			return false, fmt.Errorf("%s: spec.selector.namespaceSelector: %w", c.label(), err)
		}
		if !ok {
			return false, nil
		}
	}
	ok, err := matches(sel.WorkloadSelector, w.Labels)
	if err != nil {
		return false, fmt.Errorf("%s: spec.selector.workloadSelector: %w", c.label(), err)
	}
	return ok, nil
}

// matches applies a label selector; nil matches everything (the apimachinery
// helper would match nothing).
func matches(s *metav1.LabelSelector, set map[string]string) (bool, error) {
	if s == nil {
		return true, nil
	}
	sel, err := metav1.LabelSelectorAsSelector(s)
	if err != nil {
		return false, err
	}
	return sel.Matches(labels.Set(set)), nil
}
