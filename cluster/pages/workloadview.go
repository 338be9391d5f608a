package pages

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	auditv1 "github.com/kerf-dev/kerf/api/audit/v1"
	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/cluster/policy"
	"github.com/kerf-dev/kerf/cluster/resources"
	"github.com/kerf-dev/kerf/cluster/workload"
	webui "github.com/kerf-dev/kerf/web"
)

// WorkloadViews is the leader's source of the workload pages
// (web.WorkloadSource). A page shows a recommendation, its workload and
// the policy that governs it, read through the leader's informer cache,
// and its containers' usage series. kubectl kerf dashboard reads through
// it with its user's own client: a refused recommendation is
// web.ErrForbidden, a refused workload or policy is left out and named in
// WorkloadView.Unreadable.
type WorkloadViews struct {
	// Reader reads the recommendations, workloads, namespaces and
	// policies (the leader's cache).
	Reader client.Reader
	// Live reads a recommendation's basis where Reader has only its
	// refusals annotation (the leader's cache drops the basis beside
	// it); nil reads the basis from Reader alone.
	Live client.Reader
	// Series are the usage series; nil charts no usage.
	Series *UsageSeries
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Workload implements web.WorkloadSource for the recommendation
// id.Namespace/id.Name (id.Cluster is ignored: the leader knows one).
func (v *WorkloadViews) Workload(ctx context.Context, id webui.WorkloadID) (webui.WorkloadView, error) {
	var rsr v1alpha1.RightsizingRecommendation
	if err := v.Reader.Get(ctx, client.ObjectKey{Namespace: id.Namespace, Name: id.Name}, &rsr); err != nil {
		if apierrors.IsNotFound(err) {
			return webui.WorkloadView{}, fmt.Errorf("recommendation %s/%s: %w", id.Namespace, id.Name, webui.ErrNotFound)
		}
		if apierrors.IsForbidden(err) {
			return webui.WorkloadView{}, fmt.Errorf("%w: %w", webui.ErrForbidden, err)
		}
		return webui.WorkloadView{}, fmt.Errorf("read recommendation %s/%s: %w", id.Namespace, id.Name, err)
	}
	ref := rsr.Spec.TargetRef
	view := webui.WorkloadView{
		Namespace: rsr.Namespace, Recommendation: rsr.Name, Workload: auditv1.Workload{Kind: ref.Kind, Name: ref.Name},
		Strategy: rsr.Spec.Strategy, Phase: rsr.Status.Phase, Reason: rsr.Status.Reason, Message: rsr.Status.Message,
	}
	if c := meta.FindStatusCondition(rsr.Status.Conditions, v1alpha1.ConditionHealthWatch); c != nil {
		view.HealthWatch = &auditv1.HealthWatch{Reason: c.Reason, Message: c.Message}
	}
	w, err := workload.Get(ctx, v.Reader, rsr.Namespace, ref)
	switch {
	case apierrors.IsForbidden(err):
		// The dashboard reads with its user's credentials: the page shows
		// the recommendation without the manifest's values.
		view.Unreadable = append(view.Unreadable, fmt.Sprintf("The %s %s, so its manifest's values: %v.", ref.Kind, ref.Name, err))
		w = nil
	case err != nil && !apierrors.IsNotFound(err):
		return webui.WorkloadView{}, fmt.Errorf("read the workload of %s/%s: %w", rsr.Namespace, rsr.Name, err)
	}
	if err := v.resolvePolicy(ctx, &rsr, w, &view); err != nil {
		return webui.WorkloadView{}, err
	}
	view.Containers = containerValues(&rsr, w)
	raw, err := v.basis(ctx, &rsr)
	switch {
	case err != nil:
		view.BasisError = err.Error()
	case raw != "":
		if view.Basis, err = v1alpha1.ParseRecommendationBasis(raw); err != nil {
			view.BasisError = err.Error()
		}
	}
	for i := range rsr.Status.History {
		view.History = append(view.History, auditv1.EntryOf(&rsr, &rsr.Status.History[i]))
	}
	if v.Series != nil {
		view.Usage = v.Series.Usage(rsr.Namespace, ref.Kind, ref.Name)
	}
	view.Now = time.Now()
	if v.Now != nil {
		view.Now = v.Now()
	}
	return view, nil
}

// basis returns the recommendation's basis annotation: from rsr, or
// read through Live when rsr has the refusals annotation without it.
func (v *WorkloadViews) basis(ctx context.Context, rsr *v1alpha1.RightsizingRecommendation) (string, error) {
	raw, ok := rsr.Annotations[v1alpha1.RecommendationBasisAnnotation]
	if _, summed := rsr.Annotations[v1alpha1.RecommendationRefusalsAnnotation]; ok || !summed || v.Live == nil {
		return raw, nil
	}
	var live v1alpha1.RightsizingRecommendation
	if err := v.Live.Get(ctx, client.ObjectKeyFromObject(rsr), &live); err != nil {
		return "", fmt.Errorf("read the basis of %s/%s: %w", rsr.Namespace, rsr.Name, err)
	}
	return live.Annotations[v1alpha1.RecommendationBasisAnnotation], nil
}

// resolvePolicy finds the policy that governs the workload as the
// reconciler does (policy.Gatherer). It matches the namespace's labels
// and the workload's own, or kind, namespace and name alone when the
// workload does not exist.
func (v *WorkloadViews) resolvePolicy(ctx context.Context, rsr *v1alpha1.RightsizingRecommendation, w *workload.Workload, view *webui.WorkloadView) error {
	pols, err := policy.Gatherer{Reader: v.Reader}.InNamespace(ctx, rsr.Namespace)
	if apierrors.IsForbidden(err) {
		view.PolicyUnknown = true
		view.Unreadable = append(view.Unreadable, fmt.Sprintf("The policies and the namespace's labels, so the policy that governs the workload: %v.", err))
		return nil
	}
	if err != nil {
		return err
	}
	pw := policy.Workload{Kind: rsr.Spec.TargetRef.Kind, Namespace: rsr.Namespace, Name: rsr.Spec.TargetRef.Name}
	if w != nil {
		pw.Labels = w.Object.GetLabels()
	}
	res, err := pols.Resolve(pw)
	switch {
	case err != nil:
		view.PolicyError = err.Error()
	case res != nil:
		view.Policy = &webui.Policy{Kind: res.Ref.Kind, Name: res.Ref.Name, Namespace: res.Namespace, Weight: res.Spec.Weight,
			Guardrails: res.Spec.Guardrails, Recommend: res.Spec.Recommend}
	}
	return nil
}

// containerValues are the recommendation's values per container beside
// the pod template's, the recommendation's containers first.
func containerValues(rsr *v1alpha1.RightsizingRecommendation, w *workload.Workload) []webui.ContainerValues {
	var out []webui.ContainerValues
	index := map[string]int{}
	for _, c := range rsr.Spec.Containers {
		index[c.Name] = len(out)
		out = append(out, webui.ContainerValues{Name: c.Name, Recommended: &v1alpha1.Resources{Requests: c.Requests, Limits: c.Limits}})
	}
	if w == nil {
		return out
	}
	for _, cr := range resources.Values(&w.Template.Spec) { // (pod) too
		m := &v1alpha1.Resources{Requests: cr.Requests, Limits: cr.Limits}
		if i, ok := index[cr.Name]; ok {
			out[i].Manifest = m
		} else {
			out = append(out, webui.ContainerValues{Name: cr.Name, Manifest: m})
		}
	}
	return out
}
