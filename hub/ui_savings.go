package hub

import (
	"context"
	"fmt"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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

// Savings computes the Savings page's figures from the stored applied and
// rolled-back actions: the hub stores no recommendations. Each
// recommendation's actions become its status.history for
// cluster/savings.Summarize, per cluster. So a manifest value is the one
// before the oldest stored change, and no recommended value is known.
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
	clusters := make([]string, 0, len(byCluster))
	for c := range byCluster {
		clusters = append(clusters, c)
	}
	slices.Sort(clusters)
	for _, c := range clusters {
		for _, n := range savings.Summarize(byCluster[c], q.From, q.To) {
			out.Rows = append(out.Rows, web.SavingsRow{
				Cluster: c, Namespace: n.Namespace, Workloads: n.Workloads,
				Manifest: amounts(n.Manifest), InForce: amounts(n.InForce),
				Unrecorded: n.Unrecorded, Rollbacks: n.Rollbacks, OOMKills: n.OOMKills,
			})
		}
	}
	return out, nil
}

func amounts(a savings.Amounts) web.Amounts {
	return web.Amounts{CPUMillis: a.CPUMillis, MemoryBytes: a.MemoryBytes}
}
