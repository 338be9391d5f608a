package main

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/test/controlplane"
)

// update rewrites testdata/*.golden with what the commands print:
// go test ./cmd/kubectl-kerf/ -run Golden -update.
var update = flag.Bool("update", false, "rewrite testdata/*.golden with the commands' output")

// TestEachCommandPrintsItsGoldenFile runs every command on the fixture (a
// fixed clock, fixed times) and compares its output, stdout then stderr,
// with testdata/NAME.golden; the namespace prints as NAMESPACE.
func TestEachCommandPrintsItsGoldenFile(t *testing.T) {
	cp := controlplane.Get(t)
	f := newFixture(t, cp)
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"status", []string{"status"}},
		{"status-wide", []string{"status", "-o", "wide"}},
		{"history-web", []string{"history", "web"}},
		{"history-web-wide", []string{"history", "deployment/web", "-o", "wide"}},
		{"history-api", []string{"history", "api"}},
		{"explain-web", []string{"explain", "web"}},
		{"explain-api", []string{"explain", "api"}},
		// In this order: the pause is what the resume lifts.
		{"pause-workload", []string{"pause", "--workload", "web"}},
		{"resume-workload", []string{"resume", "--workload", "web"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := kerf(t, cp, append(tc.args, "-n", f.ns)...)
			require.Equal(t, 0, code, errOut)
			got := out
			if errOut != "" {
				got += "--- stderr\n" + errOut
			}
			golden(t, tc.name, strings.ReplaceAll(got, f.ns, "NAMESPACE"))
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
