package main

import (
	"context"
	"fmt"
	"strconv"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/duration"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/cluster/savings"
)

// totalRow names the summary's row of every namespace; no namespace's
// name has parentheses.
const totalRow = "(total)"

// summary prints, per namespace, what Kerf's changes saved (cluster/savings):
// the requests of the manifests, in force and recommended, and the
// rollbacks and OOM kills of the last since.
func (o *options) summary(ctx context.Context, all bool, output string, since time.Duration) error {
	if since <= 0 {
		return fmt.Errorf("--since %s: must be a positive duration such as 24h or 168h", since)
	}
	_, ns, items, err := o.recommendations(ctx, all)
	if err != nil {
		return err
	}
	recs := make([]*v1alpha1.RightsizingRecommendation, len(items))
	for i := range items {
		recs[i] = &items[i]
	}
	now := o.now()
	rows := savings.Summarize(recs, now.Add(-since), now)
	if output == outputYAML || output == outputJSON {
		if rows == nil {
			rows = []savings.Namespace{}
		}
		return printValue(o.streams.Out, output, rows)
	}
	if len(rows) == 0 {
		fmt.Fprintf(o.streams.ErrOut, "No RightsizingRecommendations found%s.\n", inNamespace(ns))
		return nil
	}
	window := duration.HumanDuration(since)
	table := &metav1.Table{ColumnDefinitions: []metav1.TableColumnDefinition{
		column("Namespace", false), column("Workloads", false),
		column("CPU (Manifest→In Force→Recommended)", false), column("CPU Saved", false),
		column("Memory (Manifest→In Force→Recommended)", false), column("Memory Saved", false),
		column("Rollbacks ("+window+")", false), column("OOM Kills ("+window+")", false),
		column("Unrecorded", true),
	}}
	total := savings.Total(rows)
	if len(rows) > 1 {
		total.Namespace = totalRow
		rows = append(rows, total)
	}
	for _, n := range rows {
		saved := n.Saved()
		table.Rows = append(table.Rows, metav1.TableRow{Cells: []any{
			n.Namespace, strconv.Itoa(n.Workloads),
			chain(v1alpha1.ResourceCPU, n.Manifest.CPUMillis, n.InForce.CPUMillis, n.Recommended.CPUMillis), amount(v1alpha1.ResourceCPU, saved.CPUMillis),
			chain(v1alpha1.ResourceMemory, n.Manifest.MemoryBytes, n.InForce.MemoryBytes, n.Recommended.MemoryBytes), amount(v1alpha1.ResourceMemory, saved.MemoryBytes),
			strconv.Itoa(n.Rollbacks), strconv.Itoa(n.OOMKills), strconv.Itoa(n.Unrecorded),
		}})
	}
	if err := printTable(o.streams.Out, output, false, table); err != nil {
		return err
	}
	if total.Unrecorded > 0 {
		fmt.Fprintf(o.streams.ErrOut, "%d container requests Kerf never changed are not counted: it recorded no manifest value for them.\n", total.Unrecorded)
	}
	return nil
}

// chain writes amounts of res old→new in human units: 500m→250m→100m.
func chain(res v1alpha1.ResourceName, values ...int64) string {
	s := ""
	for i, v := range values {
		if i > 0 {
			s += "→"
		}
		s += amount(res, v)
	}
	return s
}
