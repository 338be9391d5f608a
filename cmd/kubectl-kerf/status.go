package main

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/cluster/resources"
	"github.com/kerf-dev/kerf/cluster/savings"
	"github.com/kerf-dev/kerf/cluster/workload"
)

func newStatusCommand(o *options) *cobra.Command {
	var all, summary bool
	var since time.Duration
	var output, kerfNamespace string
	cmd := &cobra.Command{
		Use:   "status [-n NAMESPACE | -A] [--summary [--since 24h]] [-o wide|yaml|json]",
		Short: "Each workload with a RightsizingRecommendation: phase, values, last action",
		Long: "status lists each workload with a RightsizingRecommendation: its phase, the\n" +
			"manifest's values against the recommended ones (old→new, manifest→recommended,\n" +
			"per container, in human units; unset where nothing is set), Kerf's last\n" +
			"action and how long ago it was. It then names\n" +
			"each node whose kerf-agent is not ready (it cannot read the node's\n" +
			"containers, or is not running): Kerf does not see that node's harm.\n" +
			"--summary prints instead, per namespace, the CPU and memory requests of\n" +
			"the manifests, in force and recommended (one pod per workload, as Kerf\n" +
			"recorded them), what the changes in force saved, and the rollbacks and\n" +
			"their OOM kills in the last --since.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(output); err != nil {
				return err
			}
			if summary {
				return o.summary(cmd.Context(), all, output, since)
			}
			if cmd.Flags().Changed("since") {
				return fmt.Errorf("--since counts the rollbacks of --summary: give --summary too")
			}
			if err := o.status(cmd.Context(), all, output); err != nil {
				return err
			}
			if output == outputYAML || output == outputJSON {
				return nil
			}
			return o.agentsNotReady(cmd.Context(), kerfNamespace)
		},
	}
	cmd.Flags().BoolVarP(&all, "all-namespaces", "A", false, "List the workloads of every namespace")
	cmd.Flags().BoolVar(&summary, "summary", false, "Print per namespace what Kerf's changes saved, and their rollbacks and OOM kills")
	cmd.Flags().DurationVar(&since, "since", 24*time.Hour, "With --summary: the window the rollbacks and OOM kills are counted in")
	cmd.Flags().StringVar(&kerfNamespace, "kerf-namespace", "kerf-system", "The namespace Kerf is installed in, where its agents run")
	addOutputFlag(cmd, &output)
	return cmd
}

// recommendations lists the recommendations of the current namespace, or
// of all with all ("" then), with the client that read them.
func (o *options) recommendations(ctx context.Context, all bool) (c client.Client, ns string, items []v1alpha1.RightsizingRecommendation, err error) {
	if c, err = o.client(); err != nil {
		return nil, "", nil, err
	}
	if !all {
		if ns, err = o.namespace(); err != nil {
			return nil, "", nil, err
		}
	}
	items, err = listRecommendations(ctx, c, ns)
	return c, ns, items, err
}

func (o *options) status(ctx context.Context, all bool, output string) error {
	c, ns, items, err := o.recommendations(ctx, all)
	if err != nil {
		return err
	}
	slices.SortFunc(items, func(a, b v1alpha1.RightsizingRecommendation) int {
		return strings.Compare(a.Namespace+"/"+workloadName(&a)+"/"+a.Name, b.Namespace+"/"+workloadName(&b)+"/"+b.Name)
	})
	if output == outputYAML || output == outputJSON {
		list := &v1alpha1.RightsizingRecommendationList{Items: items}
		list.SetGroupVersionKind(v1alpha1.GroupVersion.WithKind("RightsizingRecommendationList"))
		for i := range list.Items {
			list.Items[i].SetGroupVersionKind(v1alpha1.GroupVersion.WithKind("RightsizingRecommendation"))
		}
		return printObject(o.streams.Out, output, list)
	}
	if len(items) == 0 {
		fmt.Fprintf(o.streams.ErrOut, "No RightsizingRecommendations found%s.\n", inNamespace(ns))
		return nil
	}
	table := &metav1.Table{ColumnDefinitions: []metav1.TableColumnDefinition{
		column("Workload", false), column("Phase", false), column("Reason", false),
		column("Requests (Manifest→Recommended)", false), column("Limits (Manifest→Recommended)", true),
		column("Last Action", false), column("Since", false),
		column("Recommendation", true), column("Strategy", true), column("Policy", true), column("HealthWatch", true),
	}}
	for i := range items {
		r := &items[i]
		template, err := templateValues(ctx, c, r)
		if err != nil {
			return err
		}
		requests, limits := valuesAgainst(r, template)
		last, at := "<none>", metav1.Time{}
		if n := len(r.Status.History); n > 0 {
			a := r.Status.History[n-1]
			last, at = string(a.Type), a.Time
			if a.Reason != "" {
				last += "/" + a.Reason
			}
		}
		pol := "<none>"
		if p := r.Status.Policy; p != nil {
			pol = string(p.Kind) + "/" + p.Name
		}
		hw := "<none>"
		if cond := meta.FindStatusCondition(r.Status.Conditions, v1alpha1.ConditionHealthWatch); cond != nil {
			hw = cond.Reason
		}
		table.Rows = append(table.Rows, metav1.TableRow{
			Cells: []any{workloadName(r), orNone(string(r.Status.Phase)), orNone(r.Status.Reason), requests, limits,
				last, since(o.now(), at), r.Name, string(r.Spec.Strategy), pol, hw},
			Object: runtime.RawExtension{Object: r},
		})
	}
	return printTable(o.streams.Out, output, all, table)
}

// workloadName is the recommendation's workload as Kind/name.
func workloadName(r *v1alpha1.RightsizingRecommendation) string {
	return string(r.Spec.TargetRef.Kind) + "/" + r.Spec.TargetRef.Name
}

// templateValues reads the values the workload's pod template declares,
// per container; nil when the workload is gone or may not be read.
func templateValues(ctx context.Context, c client.Client, r *v1alpha1.RightsizingRecommendation) (map[string]v1alpha1.ContainerResources, error) {
	w, err := workload.Get(ctx, c, r.Namespace, r.Spec.TargetRef)
	switch {
	case apierrors.IsNotFound(err), apierrors.IsForbidden(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("read the manifest values of %s: %w", workloadName(r), err)
	}
	out := map[string]v1alpha1.ContainerResources{}
	for _, cv := range resources.Values(&w.Template.Spec) { // (pod) too
		out[cv.Name] = cv
	}
	return out, nil
}

// valuesAgainst writes each recommended container's requests and limits
// old→new, the manifest's against the recommended, such as
// "app: cpu 500m→250m memory 256Mi→128Mi".
//
// The manifest's value of a field Kerf moved is the one it recorded
// before its first change (savings.Recorded): a Rollout patches the pod
// template, which then holds Kerf's values, not the manifest's. A field
// Kerf never moved is the template's. One neither records is "unknown":
// the workload is gone or may not be read.
func valuesAgainst(r *v1alpha1.RightsizingRecommendation, template map[string]v1alpha1.ContainerResources) (requests, limits string) {
	var reqs, lims []string
	for _, rc := range r.Spec.Containers {
		tc, known := template[rc.Name]
		manifest := v1alpha1.Resources{Requests: tc.Requests.DeepCopy(), Limits: tc.Limits.DeepCopy()}
		var unknown []savings.Field
		for _, f := range savings.Fields {
			m, _, ok := savings.Recorded(r, rc.Name, f)
			switch {
			case ok:
				setField(&manifest, f, m)
			case !known:
				unknown = append(unknown, f)
			}
		}
		req, lim := against(manifest.Requests, rc.Requests, false, unknown), against(manifest.Limits, rc.Limits, true, unknown)
		if req != "" {
			reqs = append(reqs, rc.Name+": "+req)
		}
		if lim != "" {
			lims = append(lims, rc.Name+": "+lim)
		}
	}
	return orNone(strings.Join(reqs, "; ")), orNone(strings.Join(lims, "; "))
}

// against writes one section (requests, or limits when limit) old→new as
// pairs does, with the old side of the unknown fields "unknown"; a field
// the recommendation does not set is left out, as Kerf leaves it alone.
func against(old, recommended *v1alpha1.ResourceValues, limit bool, unknown []savings.Field) string {
	var parts []string
	for _, res := range []v1alpha1.ResourceName{v1alpha1.ResourceCPU, v1alpha1.ResourceMemory} {
		a, b := quantity(old, res), quantity(recommended, res)
		if b == unset {
			continue // not recommended: Kerf leaves it as it is
		}
		if slices.Contains(unknown, savings.Field{Limit: limit, Resource: res}) {
			a = "unknown"
		}
		parts = append(parts, string(res)+" "+a+"→"+b)
	}
	return strings.Join(parts, " ")
}

// setField sets field f of r to v, millicores or bytes; 0 removes it.
func setField(r *v1alpha1.Resources, f savings.Field, v int64) {
	values := &r.Requests
	if f.Limit {
		values = &r.Limits
	}
	if *values == nil {
		*values = &v1alpha1.ResourceValues{}
	}
	var q *resource.Quantity
	switch {
	case v == 0:
	case f.Resource == v1alpha1.ResourceCPU:
		q = resource.NewMilliQuantity(v, resource.DecimalSI)
	default:
		q = resource.NewQuantity(v, resource.BinarySI)
	}
	if f.Resource == v1alpha1.ResourceCPU {
		(*values).CPU = q
	} else {
		(*values).Memory = q
	}
}

// agentLabels select the kerf-agent pods (manifests/agent.yaml).
var agentLabels = client.MatchingLabels{"app.kubernetes.io/name": "kerf", "app.kubernetes.io/component": "agent"}

// agentsNotReady names, on the error stream, each node whose kerf-agent
// pod in ns is not ready: not running, or unable to read the node's
// containers (its /readyz, node.Agent.Ready). A user who may not list
// pods there is told nothing more.
func (o *options) agentsNotReady(ctx context.Context, ns string) error {
	c, err := o.client()
	if err != nil {
		return err
	}
	var pods corev1.PodList
	err = c.List(ctx, &pods, client.InNamespace(ns), agentLabels)
	switch {
	case apierrors.IsForbidden(err), apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return fmt.Errorf("list the kerf-agent pods in %s: %w", ns, err)
	}
	slices.SortFunc(pods.Items, func(a, b corev1.Pod) int { return strings.Compare(a.Spec.NodeName, b.Spec.NodeName) })
	for i := range pods.Items {
		p := &pods.Items[i]
		if podReady(p) {
			continue
		}
		node := cmp.Or(p.Spec.NodeName, "<unscheduled>")
		fmt.Fprintf(o.streams.ErrOut, "kerf-agent is not ready on node %s (pod %s/%s, %s): Kerf does not see that node's containers; its log says why.\n",
			node, p.Namespace, p.Name, cmp.Or(string(p.Status.Phase), "Unknown"))
	}
	return nil
}

// podReady is the pod's Ready condition.
func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
