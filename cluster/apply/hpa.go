package apply

import (
	"context"
	"fmt"
	"math"
	"strings"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kerf-dev/kerf/api/v1alpha1"
)

// findHPA returns the HPA to coordinate: the one spec.hpa names, else the
// only one whose scaleTargetRef is the workload. When there is none to
// coordinate it returns nil and a note that says why.
func (a *Applier) findHPA(ctx context.Context, rsr *v1alpha1.RightsizingRecommendation) (*autoscalingv2.HorizontalPodAutoscaler, string, error) {
	ref := rsr.Spec.TargetRef
	var hpa *autoscalingv2.HorizontalPodAutoscaler
	if name := rsr.Spec.HPA.Name; name != "" {
		hpa = &autoscalingv2.HorizontalPodAutoscaler{}
		err := a.Client.Get(ctx, client.ObjectKey{Namespace: rsr.Namespace, Name: name}, hpa)
		if apierrors.IsNotFound(err) {
			return nil, fmt.Sprintf("HPA %s not found; not coordinated", name), nil
		}
		if err != nil {
			return nil, "", fmt.Errorf("get HPA %s/%s: %w", rsr.Namespace, name, err)
		}
		if !scales(hpa, ref) {
			return nil, fmt.Sprintf("HPA %s scales %s %s, not %s %s; not coordinated",
				name, hpa.Spec.ScaleTargetRef.Kind, hpa.Spec.ScaleTargetRef.Name, ref.Kind, ref.Name), nil
		}
	} else {
		var list autoscalingv2.HorizontalPodAutoscalerList
		if err := a.Client.List(ctx, &list, client.InNamespace(rsr.Namespace)); err != nil {
			return nil, "", fmt.Errorf("list HPAs in %s: %w", rsr.Namespace, err)
		}
		var names []string
		for i := range list.Items {
			if scales(&list.Items[i], ref) {
				hpa = &list.Items[i]
				names = append(names, hpa.Name)
			}
		}
		switch {
		case len(names) == 0:
			return nil, fmt.Sprintf("no HPA scales %s %s; nothing to coordinate", ref.Kind, ref.Name), nil
		case len(names) > 1:
			// The HPA controller itself refuses to act on such a target
			// (AmbiguousSelector); so does Kerf.
			return nil, fmt.Sprintf("HPAs %s all scale %s %s; name one in spec.hpa.name; not coordinated",
				strings.Join(names, ", "), ref.Kind, ref.Name), nil
		}
	}
	if cpuUtilizationMetric(hpa) < 0 {
		return nil, fmt.Sprintf("HPA %s has no cpu Resource metric with a Utilization target; not coordinated", hpa.Name), nil
	}
	return hpa, "", nil
}

// scales reports whether the HPA's scaleTargetRef is the workload.
func scales(hpa *autoscalingv2.HorizontalPodAutoscaler, ref v1alpha1.TargetRef) bool {
	t := hpa.Spec.ScaleTargetRef
	if t.Kind != string(ref.Kind) || t.Name != ref.Name {
		return false
	}
	if t.APIVersion == "" {
		return true
	}
	gv, err := schema.ParseGroupVersion(t.APIVersion)
	return err == nil && gv.Group == "apps"
}

// cpuUtilizationMetric returns the index of the HPA's first cpu Resource
// metric with a Utilization target, -1 when it has none.
func cpuUtilizationMetric(hpa *autoscalingv2.HorizontalPodAutoscaler) int {
	for i, m := range hpa.Spec.Metrics {
		if m.Type == autoscalingv2.ResourceMetricSourceType && m.Resource != nil &&
			m.Resource.Name == corev1.ResourceCPU &&
			m.Resource.Target.Type == autoscalingv2.UtilizationMetricType &&
			m.Resource.Target.AverageUtilization != nil {
			return i
		}
	}
	return -1
}

// hpaTarget returns the utilization target that keeps the absolute CPU
// target, utilization × request, when the pod's cpu request goes from
// oldMilli to newMilli. It is round(old × oldMilli / newMilli), at least 1.
// The HPA compares a pod's usage with the sum of its containers' requests,
// so the requests are summed over the pod's containers. It is not capped
// at 100: a utilization target above 100% is legitimate for an HPA, as
// pods may burst above their requests up to their limits.
func hpaTarget(old int32, oldMilli, newMilli int64) int32 {
	if newMilli <= 0 {
		return old
	}
	v := math.Round(float64(old) * float64(oldMilli) / float64(newMilli))
	return int32(min(max(v, 1), math.MaxInt32))
}

// moveHPA sets the coordinated HPA's cpu utilization target from from to
// to, with a merge patch conditional on the resourceVersion read. An HPA
// already at to is left as is and listed as touched; one at any other
// value was changed by someone else since and is left alone with a note.
func (a *Applier) moveHPA(ctx context.Context, rsr *v1alpha1.RightsizingRecommendation, name string, from, to int32, res *Result) error {
	hpa := &autoscalingv2.HorizontalPodAutoscaler{}
	err := a.Client.Get(ctx, client.ObjectKey{Namespace: rsr.Namespace, Name: name}, hpa)
	if apierrors.IsNotFound(err) {
		res.Notes = append(res.Notes, fmt.Sprintf("HPA %s not found; its target was not moved", name))
		return nil
	}
	if err != nil {
		return fmt.Errorf("get HPA %s/%s: %w", rsr.Namespace, name, err)
	}
	i := cpuUtilizationMetric(hpa)
	if i < 0 {
		res.Notes = append(res.Notes, fmt.Sprintf("HPA %s no longer has a cpu Utilization target; left as is", name))
		return nil
	}
	cur := *hpa.Spec.Metrics[i].Resource.Target.AverageUtilization
	switch cur {
	case to:
	case from:
		orig := hpa.DeepCopy()
		hpa.Spec.Metrics[i].Resource.Target.AverageUtilization = &to
		if err := a.Client.Patch(ctx, hpa, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
			return fmt.Errorf("set cpu utilization target of HPA %s/%s to %d%%: %w", rsr.Namespace, name, to, err)
		}
	default:
		res.Notes = append(res.Notes, fmt.Sprintf("HPA %s cpu utilization target is %d%%, neither %d%% nor %d%%: changed by someone else, left as is", name, cur, from, to))
		return nil
	}
	res.Touched = append(res.Touched, v1alpha1.TouchedObject{Kind: "HorizontalPodAutoscaler", Name: name, ResourceVersion: hpa.ResourceVersion})
	return nil
}

// whyNoHPA says why a change of cpu requests that asked for coordination
// has no HPA change recorded.
func (a *Applier) whyNoHPA(ctx context.Context, rsr *v1alpha1.RightsizingRecommendation) (string, error) {
	hpa, note, err := a.findHPA(ctx, rsr)
	if err != nil || hpa == nil {
		return note, err
	}
	return fmt.Sprintf("HPA %s target left as is: the sum of the pod's cpu requests, or the rounded target, does not change", hpa.Name), nil
}
