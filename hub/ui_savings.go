package hub

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	hubv1 "github.com/kerf-dev/kerf/api/hub/v1"
	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/cluster/savings"
	"github.com/kerf-dev/kerf/hub/store"
	"github.com/kerf-dev/kerf/web"
)

// uiSavings is the Savings page's address.
const uiSavings = "/ui/savings"

// MaxSavingsActions bounds the applied and rolled-back actions one Savings
// page reads; beyond it the page says it counts the newest ones only.
const MaxSavingsActions = 50000

// savingsPageSize is the page size of the Savings page's reads.
const savingsPageSize = 1000

// Savings computes the Savings page's figures per cluster and namespace.
// The requests come from the cluster's latest savings report (PUT
// /v1/clusters/{cluster}/savings), marked stale past SavingsStaleAfter.
// Rollbacks and OOM kills, and the requests of a namespace no report names,
// come from the stored applied and rolled-back actions: each
// recommendation's actions become its status.history for
// cluster/savings.Summarize. There a manifest value is the one before the
// oldest stored change, and no recommended value is known.
func (u uiSource) Savings(ctx context.Context, q web.SavingsQuery) (web.SavingsData, error) {
	ctx, cancel := context.WithTimeout(ctx, readTimeout)
	defer cancel()
	cs, err := u.s.Store.Clusters(ctx)
	if err != nil {
		return web.SavingsData{}, err
	}
	out := web.SavingsData{FromActions: true, Clusters: []string{}}
	for _, c := range cs {
		out.Clusters = append(out.Clusters, c.Name)
	}
	type key struct{ cluster, namespace, name string }
	recs := map[key]*v1alpha1.RightsizingRecommendation{}
	aq := store.ActionQuery{Types: []v1alpha1.ActionType{v1alpha1.ActionApplied, v1alpha1.ActionRolledBack},
		Cluster: q.Cluster, Namespace: q.Namespace, Limit: savingsPageSize}
	for read := 0; ; {
		items, next, err := u.s.Store.Actions(ctx, aq)
		if err != nil {
			return web.SavingsData{}, err
		}
		for _, e := range items {
			k := key{e.Cluster, e.Namespace, e.Recommendation}
			r := recs[k]
			if r == nil {
				r = &v1alpha1.RightsizingRecommendation{ObjectMeta: metav1.ObjectMeta{Namespace: e.Namespace, Name: e.Recommendation}}
				recs[k] = r
			}
			// Newest first here; reversed below, as status.history is
			// oldest first.
			r.Status.History = append(r.Status.History, v1alpha1.Action{
				Time: e.Time, Type: e.Type, Reason: e.Reason, Resources: e.Resources, Containers: e.Containers, Figures: e.Figures,
			})
			for _, c := range e.Containers {
				if !slices.ContainsFunc(r.Spec.Containers, func(s v1alpha1.ContainerResources) bool { return s.Name == c.Name }) {
					r.Spec.Containers = append(r.Spec.Containers, v1alpha1.ContainerResources{Name: c.Name})
				}
			}
		}
		read += len(items)
		if next == nil {
			break
		}
		if read >= MaxSavingsActions {
			out.Truncated = fmt.Sprintf("the newest %d", read)
			break
		}
		aq.After = next
	}
	byCluster := map[string][]*v1alpha1.RightsizingRecommendation{}
	for k, r := range recs {
		slices.Reverse(r.Status.History)
		byCluster[k.cluster] = append(byCluster[k.cluster], r)
	}
	reports, err := u.s.Store.SavingsReports(ctx)
	if err != nil {
		return web.SavingsData{}, err
	}
	reported, err := u.s.Store.Savings(ctx, q.Cluster, q.Namespace)
	if err != nil {
		return web.SavingsData{}, err
	}
	type nsKey struct{ cluster, namespace string }
	rows := map[nsKey]web.SavingsRow{}
	for c, rs := range byCluster {
		for _, n := range savings.Summarize(rs, q.From, q.To) {
			rows[nsKey{c, n.Namespace}] = web.SavingsRow{
				Cluster: c, Namespace: n.Namespace, Workloads: n.Workloads,
				Manifest: amounts(n.Manifest), InForce: amounts(n.InForce),
				Unrecorded: n.Unrecorded, Rollbacks: n.Rollbacks, OOMKills: n.OOMKills,
			}
		}
	}
	// A reported namespace takes the report's requests and keeps the
	// actions' rollbacks and OOM kills.
	for _, n := range reported {
		if _, ok := reports[n.Cluster]; !ok {
			continue
		}
		k := nsKey{n.Cluster, n.Namespace}
		r := rows[k]
		rows[k] = web.SavingsRow{
			Cluster: n.Cluster, Namespace: n.Namespace, Workloads: n.Workloads,
			Manifest: wireAmounts(n.Manifest), InForce: wireAmounts(n.InForce), Recommended: wireAmounts(n.Recommended),
			Unrecorded: n.Unrecorded, Rollbacks: r.Rollbacks, OOMKills: r.OOMKills,
			Reported: n.Reported, Stale: q.To.Sub(n.Reported) > SavingsStaleAfter,
		}
	}
	for _, k := range slices.SortedFunc(maps.Keys(rows), func(a, b nsKey) int {
		return cmp.Or(cmp.Compare(a.cluster, b.cluster), cmp.Compare(a.namespace, b.namespace))
	}) {
		out.Rows = append(out.Rows, rows[k])
	}
	return out, nil
}

func wireAmounts(a hubv1.Amounts) web.Amounts {
	return web.Amounts{CPUMillis: a.CPUMillis, MemoryBytes: a.MemoryBytes}
}

func amounts(a savings.Amounts) web.Amounts {
	return web.Amounts{CPUMillis: a.CPUMillis, MemoryBytes: a.MemoryBytes}
}
