package apply

import (
	"context"
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kerf-dev/kerf/api/v1alpha1"
)

// patchTemplate writes the targets into the workload's pod template with a
// strategic-merge patch on spec.template.spec.containers[name].resources
// that carries the resourceVersion read, so it fails with a conflict when
// the workload changed since (the caller retries). Nothing is sent when the
// template already holds the values.
func (a *Applier) patchTemplate(ctx context.Context, kind string, obj client.Object, tmpl *corev1.PodTemplateSpec, targets []target, res *Result) error {
	var containers []map[string]any
	for _, t := range targets {
		c := specContainer(&tmpl.Spec, t.name)
		if c == nil {
			return fmt.Errorf("%w: %s %s has no container %q", ErrContainerNotFound, kind, obj.GetName(), t.name)
		}
		if t.matches(&c.Resources) {
			continue
		}
		resources := map[string]map[string]any{}
		for _, f := range t.fieldsInOrder() {
			section := "requests"
			if f.limits {
				section = "limits"
			}
			if resources[section] == nil {
				resources[section] = map[string]any{}
			}
			if q := t.values[f]; q != nil {
				resources[section][string(f.res)] = q.String()
			} else {
				resources[section][string(f.res)] = nil // strategic merge: remove the key
			}
		}
		containers = append(containers, map[string]any{"name": c.Name, "resources": resources})
	}
	if len(containers) > 0 {
		patch := map[string]any{
			"metadata": map[string]any{"resourceVersion": obj.GetResourceVersion()},
			"spec":     map[string]any{"template": map[string]any{"spec": map[string]any{"containers": containers}}},
		}
		data, err := json.Marshal(patch)
		if err != nil {
			return fmt.Errorf("encode pod template patch: %w", err)
		}
		if err := a.Client.Patch(ctx, obj, client.RawPatch(types.StrategicMergePatchType, data)); err != nil {
			return fmt.Errorf("patch pod template of %s %s/%s: %w", kind, obj.GetNamespace(), obj.GetName(), err)
		}
	}
	res.Touched = append(res.Touched, v1alpha1.TouchedObject{Kind: kind, Name: obj.GetName(), ResourceVersion: obj.GetResourceVersion()})
	return nil
}
