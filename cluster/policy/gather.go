package policy

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kerf-dev/kerf/api/v1alpha1"
)

// Gatherer reads what choosing a workload's policy needs: its namespace's
// labels and the policies of the four kinds that may select it. Those are
// RightsizingPolicy, ClusterRightsizingPolicy, and the backoff design's
// RollbackPolicy and ClusterRollbackPolicy. It is the package's one
// reader; Policies.Resolve then decides with Resolve. cert-manager's
// policies.Gatherer is the model.
//
// The reconciler, the recommender and the workload pages use it, so they
// choose the same policy for a workload.
type Gatherer struct {
	// Reader reads namespaces and policies: the leader's cache.
	Reader client.Reader
}

// Policies are the namespace labels and policies a Gatherer read, for one
// namespace or for all.
type Policies struct {
	namespaces      map[string]map[string]string
	namespaced      map[string][]v1alpha1.RightsizingPolicy
	cluster         []v1alpha1.ClusterRightsizingPolicy
	rollback        map[string][]v1alpha1.RollbackPolicy
	clusterRollback []v1alpha1.ClusterRollbackPolicy
	// shared is ResolveShared's: one Resolved per policy chosen, nil for
	// Policies made by hand (ResolveShared then resolves anew).
	shared *sharedResolved
}

// sharedResolved holds the Resolved of each policy ResolveShared chose.
type sharedResolved struct {
	mu sync.Mutex
	m  map[policyKey]*Resolved
}

// policyKey names a policy of any of the four kinds.
type policyKey struct {
	kind     v1alpha1.PolicyKind
	ns, name string
}

// InNamespace reads the namespace ns, its RightsizingPolicies and
// RollbackPolicies, and every cluster policy of both kinds: what a
// workload in ns is governed by.
//
// It runs on every reconcile, so the policies are the cache's own
// objects, not copies. Resolve only reads them, and copies the spec of
// the one it chooses.
func (g Gatherer) InNamespace(ctx context.Context, ns string) (*Policies, error) {
	var namespace corev1.Namespace
	if err := g.Reader.Get(ctx, client.ObjectKey{Name: ns}, &namespace); err != nil {
		return nil, fmt.Errorf("read namespace %s: %w", ns, err)
	}
	var namespaced v1alpha1.RightsizingPolicyList
	if err := g.Reader.List(ctx, &namespaced, client.InNamespace(ns), client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("list RightsizingPolicies in %s: %w", ns, err)
	}
	var cluster v1alpha1.ClusterRightsizingPolicyList
	if err := g.Reader.List(ctx, &cluster, client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("list ClusterRightsizingPolicies: %w", err)
	}
	var rollback v1alpha1.RollbackPolicyList
	if err := g.Reader.List(ctx, &rollback, client.InNamespace(ns), client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("list RollbackPolicies in %s: %w", ns, err)
	}
	var clusterRollback v1alpha1.ClusterRollbackPolicyList
	if err := g.Reader.List(ctx, &clusterRollback, client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("list ClusterRollbackPolicies: %w", err)
	}
	return &Policies{
		namespaces:      map[string]map[string]string{ns: namespace.Labels},
		namespaced:      map[string][]v1alpha1.RightsizingPolicy{ns: namespaced.Items},
		cluster:         cluster.Items,
		rollback:        map[string][]v1alpha1.RollbackPolicy{ns: rollback.Items},
		clusterRollback: clusterRollback.Items,
		shared:          &sharedResolved{m: map[policyKey]*Resolved{}},
	}, nil
}

// All reads every namespace and every policy, once for a pass over many
// workloads (the recommender's).
func (g Gatherer) All(ctx context.Context) (*Policies, error) {
	var nss corev1.NamespaceList
	if err := g.Reader.List(ctx, &nss); err != nil {
		return nil, fmt.Errorf("list namespaces: %w", err)
	}
	var namespaced v1alpha1.RightsizingPolicyList
	if err := g.Reader.List(ctx, &namespaced); err != nil {
		return nil, fmt.Errorf("list RightsizingPolicies: %w", err)
	}
	var cluster v1alpha1.ClusterRightsizingPolicyList
	if err := g.Reader.List(ctx, &cluster); err != nil {
		return nil, fmt.Errorf("list ClusterRightsizingPolicies: %w", err)
	}
	var rollback v1alpha1.RollbackPolicyList
	if err := g.Reader.List(ctx, &rollback); err != nil {
		return nil, fmt.Errorf("list RollbackPolicies: %w", err)
	}
	var clusterRollback v1alpha1.ClusterRollbackPolicyList
	if err := g.Reader.List(ctx, &clusterRollback); err != nil {
		return nil, fmt.Errorf("list ClusterRollbackPolicies: %w", err)
	}
	p := &Policies{namespaces: map[string]map[string]string{}, namespaced: map[string][]v1alpha1.RightsizingPolicy{}, cluster: cluster.Items,
		rollback: map[string][]v1alpha1.RollbackPolicy{}, clusterRollback: clusterRollback.Items,
		shared: &sharedResolved{m: map[policyKey]*Resolved{}}}
	for _, ns := range nss.Items {
		p.namespaces[ns.Name] = ns.Labels
	}
	for _, np := range namespaced.Items {
		p.namespaced[np.Namespace] = append(p.namespaced[np.Namespace], np)
	}
	for _, rp := range rollback.Items {
		p.rollback[rp.Namespace] = append(p.rollback[rp.Namespace], rp)
	}
	return p, nil
}

// Resolve returns the policy of the four kinds that governs w, or nil,
// with the package's Resolve's rules and ranking. A workload in a
// namespace the Policies were not read for is judged without namespace
// labels or namespaced policies.
func (p *Policies) Resolve(w Workload) (*Resolved, error) {
	return choose(w, p.namespaces[w.Namespace], p.candidates(w))
}

// candidates are the policies of the four kinds that may govern w.
func (p *Policies) candidates(w Workload) []candidate {
	cands := rightsizingCandidates(w, p.namespaced[w.Namespace], p.cluster)
	return append(cands, rollbackCandidates(w, p.rollback[w.Namespace], p.clusterRollback)...)
}

// ResolveShared is Resolve for a pass over many workloads. The workloads
// one policy governs get the same Resolved, made once (its spec's copy,
// defaults and fingerprint). Callers must only read it. It is safe for
// concurrent use.
func (p *Policies) ResolveShared(w Workload) (*Resolved, error) {
	if p.shared == nil {
		return p.Resolve(w)
	}
	best, err := pick(w, p.namespaces[w.Namespace], p.candidates(w))
	if best == nil || err != nil {
		return nil, err
	}
	k := policyKey{best.kind, best.ns, best.name}
	p.shared.mu.Lock()
	defer p.shared.mu.Unlock()
	r := p.shared.m[k]
	if r == nil {
		r = best.resolved()
		p.shared.m[k] = r
	}
	return r, nil
}

// Namespaces returns the names of the namespaces read, sorted.
func (p *Policies) Namespaces() []string {
	return slices.Sorted(maps.Keys(p.namespaces))
}

// AnyRecommends reports whether any policy enables spec.recommend. The
// rollback kinds have no recommender.
func (p *Policies) AnyRecommends() bool {
	for _, c := range p.cluster {
		if c.Spec.Recommend != nil && c.Spec.Recommend.Enabled {
			return true
		}
	}
	for _, ps := range p.namespaced {
		for _, np := range ps {
			if np.Spec.Recommend != nil && np.Spec.Recommend.Enabled {
				return true
			}
		}
	}
	return false
}
