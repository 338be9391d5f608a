package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/cluster/workload"
)

// scheme holds the Kubernetes types and Kerf's.
var scheme = runtime.NewScheme()

func init() {
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(v1alpha1.AddToScheme(scheme))
}

// maxListed bounds the recommendations one command reads, page by page.
const maxListed = 10000

// options are what every command shares: kubectl's connection flags and
// the streams.
type options struct {
	flags   *genericclioptions.ConfigFlags
	streams genericiooptions.IOStreams
	now     func() time.Time
}

func newRootCommand(streams genericiooptions.IOStreams, now func() time.Time) *cobra.Command {
	o := &options{flags: genericclioptions.NewConfigFlags(true), streams: streams, now: now}
	cmd := &cobra.Command{
		Use:   "kubectl-kerf",
		Short: "What Kerf did to your workloads, and pausing it",
		Long: "kubectl kerf shows what Kerf did to each workload (status, history, explain),\n" +
			"what it saved per namespace (status --summary), and pauses or resumes its\n" +
			"applies for a policy or one workload.",
		Annotations:   map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl kerf"},
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	cmd.SetIn(streams.In)
	cmd.SetOut(streams.Out)
	cmd.SetErr(streams.ErrOut)
	o.flags.AddFlags(cmd.PersistentFlags())
	cmd.AddCommand(newStatusCommand(o), newHistoryCommand(o), newExplainCommand(o),
		newPauseCommand(o, true), newPauseCommand(o, false), newDashboardCommand(o))
	return cmd
}

// client connects to the cluster the kubeconfig flags name.
func (o *options) client() (client.Client, error) {
	cfg, err := o.flags.ToRESTConfig()
	if err != nil {
		return nil, fmt.Errorf("read the kubeconfig: %w", err)
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", cfg.Host, err)
	}
	return c, nil
}

// namespace is -n, else the kubeconfig context's namespace, else default.
func (o *options) namespace() (string, error) {
	ns, _, err := o.flags.ToRawKubeConfigLoader().Namespace()
	if err != nil {
		return "", fmt.Errorf("read the namespace from the kubeconfig: %w", err)
	}
	return ns, nil
}

// listRecommendations lists the recommendations of namespace ns ("" for
// every namespace), page by page, at most maxListed.
func listRecommendations(ctx context.Context, c client.Client, ns string) ([]v1alpha1.RightsizingRecommendation, error) {
	var out []v1alpha1.RightsizingRecommendation
	cont := ""
	for {
		var list v1alpha1.RightsizingRecommendationList
		opts := []client.ListOption{client.Limit(500), client.Continue(cont)}
		if ns != "" {
			opts = append(opts, client.InNamespace(ns))
		}
		if err := c.List(ctx, &list, opts...); err != nil {
			return nil, fmt.Errorf("list RightsizingRecommendations%s: %w", inNamespace(ns), err)
		}
		out = append(out, list.Items...)
		if len(out) > maxListed {
			return nil, fmt.Errorf("list RightsizingRecommendations%s: more than %d; name a namespace with -n", inNamespace(ns), maxListed)
		}
		if cont = list.Continue; cont == "" {
			return out, nil
		}
	}
}

func inNamespace(ns string) string {
	if ns == "" {
		return " in every namespace"
	}
	return fmt.Sprintf(" in namespace %q", ns)
}

// parseKind reads a workload kind as kubectl spells it: deployment,
// deployments, deploy, Deployment, deployment.apps, and the same for
// statefulset (sts) and daemonset (ds).
func parseKind(s string) (v1alpha1.WorkloadKind, bool) {
	switch strings.TrimSuffix(strings.ToLower(s), ".apps") {
	case "deployment", "deployments", "deploy":
		return v1alpha1.KindDeployment, true
	case "statefulset", "statefulsets", "sts":
		return v1alpha1.KindStatefulSet, true
	case "daemonset", "daemonsets", "ds":
		return v1alpha1.KindDaemonSet, true
	}
	return "", false
}

// findRecommendation finds the recommendation arg names in ns: the
// recommendation's own name, or its workload's kind/name.
func findRecommendation(ctx context.Context, c client.Client, ns, arg string) (*v1alpha1.RightsizingRecommendation, error) {
	if arg == "" {
		return nil, fmt.Errorf("WORKLOAD is empty: give a recommendation's name or a workload's kind/name, such as deployment/web")
	}
	kindName, name, ok := strings.Cut(arg, "/")
	if !ok {
		var rsr v1alpha1.RightsizingRecommendation
		err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: arg}, &rsr)
		if apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("no RightsizingRecommendation named %q in namespace %q (give the recommendation's name, or the workload's kind/name such as deployment/%s)", arg, ns, arg)
		}
		if err != nil {
			return nil, fmt.Errorf("get RightsizingRecommendation %s/%s: %w", ns, arg, err)
		}
		return &rsr, nil
	}
	kind, ok := parseKind(kindName)
	if !ok {
		return nil, fmt.Errorf("WORKLOAD %q: kind %q is not one Kerf manages (%s)", arg, kindName, kindList())
	}
	if name == "" {
		return nil, fmt.Errorf("WORKLOAD %q: the name after %q is empty", arg, kindName+"/")
	}
	all, err := listRecommendations(ctx, c, ns)
	if err != nil {
		return nil, err
	}
	var found []*v1alpha1.RightsizingRecommendation
	for i := range all {
		if all[i].Spec.TargetRef.Kind == kind && all[i].Spec.TargetRef.Name == name {
			found = append(found, &all[i])
		}
	}
	switch len(found) {
	case 0:
		return nil, fmt.Errorf("no RightsizingRecommendation targets %s/%s in namespace %q", kind, name, ns)
	case 1:
		return found[0], nil
	}
	names := make([]string, len(found))
	for i, r := range found {
		names[i] = r.Name
	}
	slices.Sort(names)
	return nil, fmt.Errorf("%d RightsizingRecommendations target %s/%s in namespace %q (%s): name one", len(found), kind, name, ns, strings.Join(names, ", "))
}

func kindList() string {
	s := make([]string, len(workload.Kinds))
	for i, k := range workload.Kinds {
		s[i] = string(k)
	}
	return strings.Join(s, ", ")
}

// completeWorkloads completes WORKLOAD with the names of the namespace's
// recommendations and their workloads' kind/name.
func (o *options) completeWorkloads(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
	if len(args) > 0 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	c, err := o.client()
	if err != nil {
		return nil, cobra.ShellCompDirectiveError
	}
	ns, err := o.namespace()
	if err != nil {
		return nil, cobra.ShellCompDirectiveError
	}
	all, err := listRecommendations(cmd.Context(), c, ns)
	if err != nil {
		return nil, cobra.ShellCompDirectiveError
	}
	var out []string
	for _, r := range all {
		for _, s := range []string{r.Name, strings.ToLower(string(r.Spec.TargetRef.Kind)) + "/" + r.Spec.TargetRef.Name} {
			if strings.HasPrefix(s, toComplete) && !slices.Contains(out, s) {
				out = append(out, s)
			}
		}
	}
	return out, cobra.ShellCompDirectiveNoFileComp
}

// recommendation finds the RightsizingRecommendation WORKLOAD names (its
// name, or the workload's kind/name) in the namespace of the flags, and
// returns it with the client it was read with.
func (o *options) recommendation(ctx context.Context, arg string) (*v1alpha1.RightsizingRecommendation, client.Client, error) {
	c, err := o.client()
	if err != nil {
		return nil, nil, err
	}
	ns, err := o.namespace()
	if err != nil {
		return nil, nil, err
	}
	r, err := findRecommendation(ctx, c, ns, arg)
	return r, c, err
}
