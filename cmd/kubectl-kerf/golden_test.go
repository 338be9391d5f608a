package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/test/controlplane"
)

// update rewrites testdata/*.golden with what the commands print:
// go test ./cmd/kubectl-kerf/ -run Golden -update.
var update = flag.Bool("update", false, "rewrite testdata/*.golden with the commands' output")

// TestEachCommandPrintsItsGoldenFile runs every command on the fixture (a
// fixed clock, fixed times) and compares its output, stdout then stderr,
// with testdata/NAME.golden; the namespace prints as golden-NNNNNN.
func TestEachCommandPrintsItsGoldenFile(t *testing.T) {
	cp := controlplane.Get(t)
	// A namespace name of one length whatever the tests before, so that
	// the columns of the tables that print it stay where they are.
	seq, err := strconv.Atoi(strings.TrimPrefix(controlplane.UniqueName("g"), "g-"))
	require.NoError(t, err)
	f := newFixtureIn(t, cp, fmt.Sprintf("golden-%06d", seq))
	require.NoError(t, cp.Client.Create(context.Background(), &v1alpha1.RightsizingPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "guard"}}))
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"status", []string{"status"}},
		{"status-wide", []string{"status", "-o", "wide"}},
		{"status-summary", []string{"status", "--summary"}},
		{"status-summary-wide", []string{"status", "--summary", "-o", "wide"}},
		// The rollback was 5m ago: a window of 1m counts none.
		{"status-summary-1m", []string{"status", "--summary", "--since", "1m"}},
		{"status-summary-json", []string{"status", "--summary", "-o", "json"}},
		{"history-web", []string{"history", "web"}},
		{"history-web-wide", []string{"history", "deployment/web", "-o", "wide"}},
		{"history-api", []string{"history", "api"}},
		{"explain-web", []string{"explain", "web"}},
		{"explain-api", []string{"explain", "api"}},
		// In this order: the pause is what the resume lifts.
		{"pause-workload", []string{"pause", "--workload", "web"}},
		{"resume-workload", []string{"resume", "--workload", "web"}},
		{"pause-policy", []string{"pause", "guard"}},
		{"pause-policy-again", []string{"pause", "rightsizingpolicy/guard"}},
		{"resume-policy", []string{"resume", "guard"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := kerf(t, cp, append(tc.args, "-n", f.ns)...)
			require.Equal(t, 0, code, errOut)
			got := out
			if errOut != "" {
				got += "--- stderr\n" + errOut
			}
			golden(t, tc.name, strings.ReplaceAll(got, f.ns, "golden-NNNNNN"))
		})
	}
}

// golden compares got with testdata/name.golden, or writes it there with
// -update.
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		require.NoError(t, os.MkdirAll("testdata", 0o755))
		require.NoError(t, os.WriteFile(path, []byte(got), 0o644))
		return
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "run with -update to write it")
	assert.Equal(t, string(want), got, "%s differs (go test -run Golden -update rewrites it)", path)
}

func TestAmountsPrintInHumanUnits(t *testing.T) {
	for _, tc := range []struct {
		res  v1alpha1.ResourceName
		v    int64
		want string
	}{
		{v1alpha1.ResourceCPU, 0, "0m"},
		{v1alpha1.ResourceCPU, 64, "64m"},
		{v1alpha1.ResourceCPU, 1000, "1"},
		{v1alpha1.ResourceCPU, 1500, "1.5"},
		{v1alpha1.ResourceCPU, -250, "-250m"},
		{v1alpha1.ResourceMemory, 512, "512"},
		{v1alpha1.ResourceMemory, 64 << 10, "64Ki"},
		{v1alpha1.ResourceMemory, 262144000, "250Mi"},
		{v1alpha1.ResourceMemory, 367001600, "350Mi"},
		{v1alpha1.ResourceMemory, 500000000, "476.84Mi"},
		{v1alpha1.ResourceMemory, 3 << 29, "1.5Gi"},
		{v1alpha1.ResourceMemory, -(128 << 20), "-128Mi"},
	} {
		assert.Equal(t, tc.want, amount(tc.res, tc.v), "%s %d", tc.res, tc.v)
	}
}

func TestSummarySinceIsCheckedAndNeedsSummary(t *testing.T) {
	cp := controlplane.Get(t)
	f := newFixture(t, cp)
	code, _, errOut := kerf(t, cp, "status", "--since", "1h", "-n", f.ns)
	assert.Equal(t, 1, code)
	assert.Equal(t, "error: --since counts the rollbacks of --summary: give --summary too\n", errOut)
	code, _, errOut = kerf(t, cp, "status", "--summary", "--since", "-1h", "-n", f.ns)
	assert.Equal(t, 1, code)
	assert.Equal(t, "error: --since -1h0m0s: must be a positive duration such as 24h or 168h\n", errOut)

	// Every namespace: a row each, then their total.
	newFixture(t, cp)
	code, out, errOut := kerf(t, cp, "status", "--summary", "-A")
	require.Equal(t, 0, code, errOut)
	assert.Regexp(t, `(?m)^`+f.ns+`\s+2\s+500m→250m→250m\s+250m\s+256Mi→256Mi→128Mi\s+0\s+1\s+2$`, out)
	assert.Regexp(t, `\n\(total\)\s+\d+\s+\S+\s+\S+\s+\S+\s+\S+\s+\d+\s+\d+\n$`, out, "the total comes last")
}
