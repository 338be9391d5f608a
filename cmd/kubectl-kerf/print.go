package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/cli-runtime/pkg/printers"
	"sigs.k8s.io/yaml"

	"github.com/kerf-dev/kerf/api/v1alpha1"
)

// The output formats of -o: the table (empty), wide, yaml and json.
const (
	outputTable = ""
	outputWide  = "wide"
	outputYAML  = "yaml"
	outputJSON  = "json"
)

// addOutputFlag adds -o/--output to cmd.
func addOutputFlag(cmd *cobra.Command, output *string) {
	cmd.Flags().StringVarP(output, "output", "o", "", "Output format: wide, yaml or json (a table when omitted)")
	_ = cmd.RegisterFlagCompletionFunc("output", cobra.FixedCompletions([]string{outputWide, outputYAML, outputJSON}, cobra.ShellCompDirectiveNoFileComp))
}

// checkOutput refuses an -o value other than wide, yaml and json.
func checkOutput(output string) error {
	switch output {
	case outputTable, outputWide, outputYAML, outputJSON:
		return nil
	}
	return fmt.Errorf("--output %q: must be one of wide, yaml, json (or omitted for a table)", output)
}

// printObject prints obj as yaml or json with cli-runtime's printers, as
// kubectl get -o yaml|json does.
func printObject(w io.Writer, output string, obj runtime.Object) error {
	var p printers.ResourcePrinter = &printers.JSONPrinter{}
	if output == outputYAML {
		p = &printers.YAMLPrinter{}
	}
	if err := p.PrintObj(obj, w); err != nil {
		return fmt.Errorf("print %s: %w", output, err)
	}
	return nil
}

// printValue prints v, which is no Kubernetes object, as yaml or json.
func printValue(w io.Writer, output string, v any) error {
	var b []byte
	var err error
	if output == outputYAML {
		b, err = yaml.Marshal(v)
	} else {
		b, err = json.MarshalIndent(v, "", "    ")
		b = append(b, '\n')
	}
	if err != nil {
		return fmt.Errorf("encode %s: %w", output, err)
	}
	_, err = w.Write(b)
	return err
}

// printTable prints table as kubectl does: columns of priority 0, and the
// others too with -o wide; a Namespace column first when withNamespace.
func printTable(w io.Writer, output string, withNamespace bool, table *metav1.Table) error {
	p := printers.NewTablePrinter(printers.PrintOptions{Wide: output == outputWide, WithNamespace: withNamespace})
	if err := p.PrintObj(table, w); err != nil {
		return fmt.Errorf("print the table: %w", err)
	}
	return nil
}

// column is a table column; wide ones show only with -o wide.
func column(name string, wide bool) metav1.TableColumnDefinition {
	c := metav1.TableColumnDefinition{Name: name, Type: "string"}
	if wide {
		c.Priority = 1
	}
	return c
}

// since is the time from t to now as kubectl's AGE column writes it, or
// <none> without a time.
func since(now time.Time, t metav1.Time) string {
	if t.IsZero() {
		return "<none>"
	}
	return duration.HumanDuration(now.Sub(t.Time))
}

// until is how long from now to t, such as "in 23h", or "passed".
func until(now time.Time, t time.Time) string {
	if !t.After(now) {
		return "passed"
	}
	return "in " + duration.HumanDuration(t.Sub(now))
}

// unset is what a value Kerf or the manifest did not set prints as.
const unset = "unset"

// quantity writes one resource of v in human units (amount), or unset.
func quantity(v *v1alpha1.ResourceValues, res v1alpha1.ResourceName) string {
	if v == nil {
		return unset
	}
	q := v.CPU
	if res == v1alpha1.ResourceMemory {
		q = v.Memory
	}
	if q == nil {
		return unset
	}
	if res == v1alpha1.ResourceCPU {
		return amount(res, q.MilliValue())
	}
	return amount(res, q.Value())
}

// pairs writes one side of values against another, old→new, per
// resource, such as "cpu 500m→250m memory 256Mi→128Mi"; a resource absent
// on both sides is left out, one absent on one side is unset.
func pairs(before, after *v1alpha1.ResourceValues) string {
	var parts []string
	for _, res := range []v1alpha1.ResourceName{v1alpha1.ResourceCPU, v1alpha1.ResourceMemory} {
		a, b := quantity(before, res), quantity(after, res)
		if a == unset && b == unset {
			continue
		}
		parts = append(parts, string(res)+" "+a+"→"+b)
	}
	return strings.Join(parts, " ")
}

// amount writes millicores or bytes in human units: CPU as millicores
// below a core and cores above (250m, 1, 1.5), memory in the largest
// binary unit it reaches (512, 64Ki, 250Mi, 1.5Gi), to two decimals.
func amount(res v1alpha1.ResourceName, v int64) string {
	if res == v1alpha1.ResourceCPU {
		if v > -1000 && v < 1000 {
			return strconv.FormatInt(v, 10) + "m"
		}
		return strconv.FormatFloat(float64(v)/1000, 'f', -1, 64)
	}
	abs := v
	if abs < 0 {
		abs = -abs
	}
	for _, u := range []struct {
		suffix string
		size   int64
	}{{"Ti", 1 << 40}, {"Gi", 1 << 30}, {"Mi", 1 << 20}, {"Ki", 1 << 10}} {
		if abs >= u.size {
			return twoDecimals(float64(v)/float64(u.size)) + u.suffix
		}
	}
	return strconv.FormatInt(v, 10)
}

// twoDecimals writes f rounded to two decimals, without trailing zeros.
func twoDecimals(f float64) string {
	return strconv.FormatFloat(math.Round(f*100)/100, 'f', -1, 64)
}

func orNone(s string) string {
	if s == "" {
		return "<none>"
	}
	return s
}

func resourceList(rs []v1alpha1.ResourceName) string {
	s := make([]string, len(rs))
	for i, r := range rs {
		s[i] = string(r)
	}
	return orNone(strings.Join(s, ","))
}
