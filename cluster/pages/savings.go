package pages

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/cluster/savings"
	webui "github.com/kerf-dev/kerf/web"
)

// Savings is the leader's source of the Savings page (web.SavingsSource):
// cluster/savings' figures over the recommendations Reader lists. The
// leader reads its cache; kubectl kerf dashboard its user's client, whose
// refusal is web.ErrForbidden.
type Savings struct {
	// Reader lists the RightsizingRecommendations.
	Reader client.Reader
}

// Savings implements web.SavingsSource; q.Cluster is ignored (the leader
// knows one cluster).
func (s *Savings) Savings(ctx context.Context, q webui.SavingsQuery) (webui.SavingsData, error) {
	var list v1alpha1.RightsizingRecommendationList
	var opts []client.ListOption
	if q.Namespace != "" {
		opts = append(opts, client.InNamespace(q.Namespace))
	}
	if err := s.Reader.List(ctx, &list, opts...); err != nil {
		if apierrors.IsForbidden(err) {
			return webui.SavingsData{}, fmt.Errorf("%w: %w", webui.ErrForbidden, err)
		}
		return webui.SavingsData{}, fmt.Errorf("list recommendations: %w", err)
	}
	recs := make([]*v1alpha1.RightsizingRecommendation, len(list.Items))
	for i := range list.Items {
		recs[i] = &list.Items[i]
	}
	var out webui.SavingsData
	for _, n := range savings.Summarize(recs, q.From, q.To) {
		out.Rows = append(out.Rows, SavingsRow(n))
	}
	return out, nil
}

// SavingsRow is n as the Savings page shows it.
func SavingsRow(n savings.Namespace) webui.SavingsRow {
	return webui.SavingsRow{
		Namespace: n.Namespace, Workloads: n.Workloads,
		Manifest: amounts(n.Manifest), InForce: amounts(n.InForce), Recommended: amounts(n.Recommended),
		Unrecorded: n.Unrecorded, Rollbacks: n.Rollbacks, OOMKills: n.OOMKills,
	}
}

func amounts(a savings.Amounts) webui.Amounts {
	return webui.Amounts{CPUMillis: a.CPUMillis, MemoryBytes: a.MemoryBytes}
}
