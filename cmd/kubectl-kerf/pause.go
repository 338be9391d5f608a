package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kerf-dev/kerf/api/v1alpha1"
)

func newPauseCommand(o *options, pause bool) *cobra.Command {
	var wl string
	verb, what := "pause", "Pause Kerf's applies"
	if !pause {
		verb, what = "resume", "Resume Kerf's applies"
	}
	cmd := &cobra.Command{
		Use:   verb + " POLICY | " + verb + " --workload WORKLOAD",
		Short: what + " for a policy's workloads or one workload",
		Long: what + ". For a policy (a RightsizingPolicy in the namespace, else the\n" +
			"ClusterRightsizingPolicy of that name; rightsizingpolicy/NAME or\n" +
			"clusterrightsizingpolicy/NAME to say which) it sets spec.guardrails.paused; for\n" +
			"one workload (--workload, the recommendation's name or the workload's\n" +
			"kind/name) the annotation " + v1alpha1.PausedAnnotation + " on its RightsizingRecommendation.\n" +
			"A pause blocks applies (phase Blocked, reason Paused), never rollbacks.\n" +
			"resume --workload of a Degraded workload also sets the annotation " + v1alpha1.ResumeAnnotation + "\n" +
			"to now: Kerf applies again, counting only the changes from then on.",
		Args: func(cmd *cobra.Command, args []string) error {
			switch {
			case wl != "" && len(args) > 0:
				return fmt.Errorf("give a POLICY or --workload, not both")
			case wl == "" && len(args) != 1:
				return fmt.Errorf("give one POLICY, or --workload WORKLOAD")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if wl != "" {
				return o.pauseWorkload(cmd.Context(), wl, pause)
			}
			return o.pausePolicy(cmd.Context(), args[0], pause)
		},
	}
	cmd.Flags().StringVar(&wl, "workload", "", "The workload to "+verb+": its recommendation's name or its kind/name, such as deployment/web")
	_ = cmd.RegisterFlagCompletionFunc("workload", o.completeWorkloads)
	return cmd
}

func (o *options) pausePolicy(ctx context.Context, arg string, pause bool) error {
	c, err := o.client()
	if err != nil {
		return err
	}
	ns, err := o.namespace()
	if err != nil {
		return err
	}
	obj, label, err := findPolicy(ctx, c, ns, arg)
	if err != nil {
		return err
	}
	var spec *v1alpha1.PolicySpec
	switch p := obj.(type) {
	case *v1alpha1.RightsizingPolicy:
		spec = &p.Spec
	case *v1alpha1.ClusterRightsizingPolicy:
		spec = &p.Spec
	}
	if spec.Guardrails.Paused == pause {
		fmt.Fprintf(o.streams.Out, "%s already %s (spec.guardrails.paused is %t): nothing changed\n", label, pausedWord(pause), pause)
		return nil
	}
	patch := `{"spec":{"guardrails":{"paused":null}}}`
	if pause {
		patch = `{"spec":{"guardrails":{"paused":true}}}`
	}
	if err := c.Patch(ctx, obj, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
		return fmt.Errorf("%s %s: %w", verbOf(pause), label, err)
	}
	if pause {
		fmt.Fprintf(o.streams.Out, "%s paused (spec.guardrails.paused set to true): the workloads it governs get no new applies; rollbacks still run\n", label)
	} else {
		fmt.Fprintf(o.streams.Out, "%s resumed (spec.guardrails.paused cleared): the workloads it governs get applies again\n", label)
	}
	return nil
}

// findPolicy finds the policy arg names: rightsizingpolicy/NAME in ns,
// clusterrightsizingpolicy/NAME, or NAME: the RightsizingPolicy in ns,
// else the ClusterRightsizingPolicy.
func findPolicy(ctx context.Context, c client.Client, ns, arg string) (client.Object, string, error) {
	kind, name, ok := strings.Cut(arg, "/")
	if !ok {
		kind, name = "", arg
	}
	if name == "" {
		return nil, "", fmt.Errorf("POLICY %q: the name is empty", arg)
	}
	switch strings.ToLower(kind) {
	case "", "rightsizingpolicy", "rightsizingpolicies", "rightsizingpolicy.kerf.dev":
		var p v1alpha1.RightsizingPolicy
		err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &p)
		if err == nil {
			return &p, fmt.Sprintf("RightsizingPolicy %s/%s", ns, name), nil
		}
		if !apierrors.IsNotFound(err) {
			return nil, "", fmt.Errorf("get RightsizingPolicy %s/%s: %w", ns, name, err)
		}
		if kind != "" {
			return nil, "", fmt.Errorf("no RightsizingPolicy named %q in namespace %q", name, ns)
		}
		fallthrough
	case "clusterrightsizingpolicy", "clusterrightsizingpolicies", "clusterrightsizingpolicy.kerf.dev":
		var p v1alpha1.ClusterRightsizingPolicy
		err := c.Get(ctx, client.ObjectKey{Name: name}, &p)
		if err == nil {
			return &p, "ClusterRightsizingPolicy " + name, nil
		}
		if !apierrors.IsNotFound(err) {
			return nil, "", fmt.Errorf("get ClusterRightsizingPolicy %s: %w", name, err)
		}
		if kind == "" {
			return nil, "", fmt.Errorf("no RightsizingPolicy named %q in namespace %q and no ClusterRightsizingPolicy named %q", name, ns, name)
		}
		return nil, "", fmt.Errorf("no ClusterRightsizingPolicy named %q", name)
	case "rollbackpolicy", "rollbackpolicies", "rollbackpolicy.kerf.dev",
		"clusterrollbackpolicy", "clusterrollbackpolicies", "clusterrollbackpolicy.kerf.dev":
		// The backoff design's kinds have no pause field (docs/api.md).
		return nil, "", fmt.Errorf("POLICY %q: a %s has no pause; pause its workloads with --workload, or let a paused RightsizingPolicy of higher weight govern them", arg, strings.ToLower(kind))
	}
	return nil, "", fmt.Errorf("POLICY %q: kind %q is not rightsizingpolicy or clusterrightsizingpolicy", arg, kind)
}

func (o *options) pauseWorkload(ctx context.Context, arg string, pause bool) error {
	r, c, err := o.recommendation(ctx, arg)
	if err != nil {
		return err
	}
	label := fmt.Sprintf("%s (RightsizingRecommendation %s/%s)", workloadName(r), r.Namespace, r.Name)
	if !pause {
		if d := r.Status.Degraded; d != nil && d.Since != nil {
			return o.resumeDegraded(ctx, c, r, label)
		}
	}
	if (r.Annotations[v1alpha1.PausedAnnotation] == "true") == pause {
		fmt.Fprintf(o.streams.Out, "%s already %s: nothing changed\n", label, pausedWord(pause))
		return nil
	}
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:null}}}`, v1alpha1.PausedAnnotation)
	if pause {
		patch = fmt.Sprintf(`{"metadata":{"annotations":{%q:"true"}}}`, v1alpha1.PausedAnnotation)
	}
	if err := c.Patch(ctx, r, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
		return fmt.Errorf("%s %s: %w", verbOf(pause), label, err)
	}
	if pause {
		fmt.Fprintf(o.streams.Out, "%s paused (annotation %s=true set): no new applies; rollbacks still run\n", label, v1alpha1.PausedAnnotation)
	} else {
		fmt.Fprintf(o.streams.Out, "%s resumed (annotation %s removed): applies again as its policy allows\n", label, v1alpha1.PausedAnnotation)
	}
	return nil
}

// resumeDegraded resumes a Degraded workload: the annotation
// kerf.dev/resumed-at gets the current time, which the leader reads,
// and a pause annotation is removed with it.
func (o *options) resumeDegraded(ctx context.Context, c client.Client, r *v1alpha1.RightsizingRecommendation, label string) error {
	at := o.now().UTC().Format(time.RFC3339)
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:null,%q:%q}}}`, v1alpha1.PausedAnnotation, v1alpha1.ResumeAnnotation, at)
	if err := c.Patch(ctx, r, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
		return fmt.Errorf("resume %s: %w", label, err)
	}
	d := r.Status.Degraded
	fmt.Fprintf(o.streams.Out, "%s resumed (annotation %s=%s set): Degraded since %s, %d of its last %d changes rolled back; "+
		"only the changes from now on count\n", label, v1alpha1.ResumeAnnotation, at, d.Since.UTC().Format(time.RFC3339), d.RolledBack, d.Of)
	return nil
}

func pausedWord(pause bool) string {
	if pause {
		return "paused"
	}
	return "not paused"
}

func verbOf(pause bool) string {
	if pause {
		return "pause"
	}
	return "resume"
}
