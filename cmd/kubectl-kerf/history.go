package main

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kerf-dev/kerf/api/v1alpha1"
)

func newHistoryCommand(o *options) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "history WORKLOAD [-n NAMESPACE] [-o wide|yaml|json]",
		Short: "Kerf's actions on a workload, newest first",
		Long: "history prints status.history of the workload's RightsizingRecommendation,\n" +
			"newest first: time, type, reason, resources, old→new values and figures.\n" +
			"WORKLOAD is the recommendation's name or the workload's kind/name\n" +
			"(deployment/web). -o yaml|json prints the actions, newest first.",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: o.completeWorkloads,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(output); err != nil {
				return err
			}
			return o.history(cmd.Context(), args[0], output)
		},
	}
	addOutputFlag(cmd, &output)
	return cmd
}

func (o *options) history(ctx context.Context, arg, output string) error {
	r, _, err := o.recommendation(ctx, arg)
	if err != nil {
		return err
	}
	actions := slices.Clone(r.Status.History)
	slices.Reverse(actions)
	if output == outputYAML || output == outputJSON {
		if actions == nil {
			actions = []v1alpha1.Action{}
		}
		return printValue(o.streams.Out, output, actions)
	}
	if len(actions) == 0 {
		fmt.Fprintf(o.streams.ErrOut, "No actions recorded for %s (RightsizingRecommendation %s/%s).\n", workloadName(r), r.Namespace, r.Name)
		return nil
	}
	table := &metav1.Table{ColumnDefinitions: []metav1.TableColumnDefinition{
		column("Time", false), column("Age", false), column("Type", false), column("Reason", false),
		column("Resources", false), column("Old→New", false), column("Figures", false),
		column("Seq", true), column("Message", true),
	}}
	wide := output == outputWide
	for i := range actions {
		a := &actions[i]
		table.Rows = append(table.Rows, metav1.TableRow{Cells: []any{
			a.Time.UTC().Format(time.RFC3339), since(o.now(), a.Time), string(a.Type), orNone(a.Reason),
			resourceList(a.Resources), oldNew(a, wide), orNone(strings.Join(a.Figures, "; ")),
			strconv.FormatInt(a.Seq, 10), orNone(a.Message),
		}})
	}
	return printTable(o.streams.Out, output, false, table)
}

// oldNew writes an action's values per container, old→new: requests, and
// limits too when wide; refusals as asked→held.
func oldNew(a *v1alpha1.Action, wide bool) string {
	var parts []string
	for _, cc := range a.Containers {
		s := pairs(cc.Old.Requests, cc.New.Requests)
		if wide {
			if l := pairs(cc.Old.Limits, cc.New.Limits); l != "" {
				s = strings.TrimSpace(s + " limits " + l)
			}
		}
		if s != "" {
			parts = append(parts, cc.Name+": "+s)
		}
	}
	for _, rf := range a.Refusals {
		parts = append(parts, rf.Container+": "+string(rf.Resource)+" "+rf.Field+" held "+amount(rf.Resource, rf.Held)+" (asked "+amount(rf.Resource, rf.Asked)+", "+rf.Reason+")")
	}
	return orNone(strings.Join(parts, "; "))
}
