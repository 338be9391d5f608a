package apply

import (
	"context"
	"encoding/json"
	"fmt"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/cluster/resources"
	"github.com/kerf-dev/kerf/cluster/workload"
)

// patchTemplate writes the targets into the workload's pod template with a
// strategic-merge patch on spec.template.spec.containers[name].resources,
// and on spec.template.spec.resources for the pod-level target.
// The patch carries the resourceVersion read, so it fails with a conflict
// when the workload changed since; the caller retries. Nothing is sent
// when the template already holds the values. The patch also sets the
// workload's annotations, a nil value removing one, and res.Annotated says
// so.
func (a *Applier) patchTemplate(ctx context.Context, w *workload.Workload, targets []target, annotations map[string]*string, res *Result) error {
	obj := w.Object
	var containers []map[string]any
	podSpec := map[string]any{}
	for _, t := range targets {
		rr, ok := resources.Requirements(&w.Template.Spec, t.name)
		if !ok {
			return fmt.Errorf("%w: %s %s has no container %q", ErrContainerNotFound, w.Kind, obj.GetName(), t.name)
		}
		if t.matches(&rr) {
			continue
		}
		sections := map[string]map[string]any{}
		for _, f := range t.fieldsInOrder() {
			section := f.Section()
			if sections[section] == nil {
				sections[section] = map[string]any{}
			}
			if q := t.values[f]; q != nil {
				sections[section][string(f.Resource)] = q.String()
			} else {
				sections[section][string(f.Resource)] = nil // strategic merge: remove the key
			}
		}
		if t.name == v1alpha1.PodLevel {
			podSpec["resources"] = sections
			continue
		}
		containers = append(containers, map[string]any{"name": t.name, "resources": sections})
	}
	if len(containers) > 0 {
		podSpec["containers"] = containers
	}
	if len(podSpec) > 0 {
		meta := map[string]any{"resourceVersion": obj.GetResourceVersion()}
		if len(annotations) > 0 {
			meta["annotations"] = annotations
		}
		patch := map[string]any{
			"metadata": meta,
			"spec":     map[string]any{"template": map[string]any{"spec": podSpec}},
		}
		data, err := json.Marshal(patch)
		if err != nil {
			return fmt.Errorf("encode pod template patch: %w", err)
		}
		if err := a.Client.Patch(ctx, obj, client.RawPatch(types.StrategicMergePatchType, data)); err != nil {
			return fmt.Errorf("patch pod template of %s: %w", w, err)
		}
		res.Annotated = len(annotations) > 0
	}
	res.Touched = append(res.Touched, v1alpha1.TouchedObject{Kind: string(w.Kind), Name: obj.GetName(), ResourceVersion: obj.GetResourceVersion()})
	return nil
}
