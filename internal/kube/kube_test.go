package kube

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestVersionsAreTheScriptsVersions checks that versions.env holds both
// versions as release tags, and that hack/controlplane.sh reads this file
// rather than a copy of the versions.
func TestVersionsAreTheScriptsVersions(t *testing.T) {
	release := regexp.MustCompile(`^v\d+\.\d+\.\d+$`)
	assert.Regexp(t, release, KubernetesVersion)
	assert.Regexp(t, release, EtcdVersion)

	script, err := os.ReadFile("../../hack/controlplane.sh")
	require.NoError(t, err)
	assert.Contains(t, string(script), "internal/kube/versions.env")
	assert.NotContains(t, string(script), KubernetesVersion, "the script names the version only through versions.env")
	assert.NotContains(t, string(script), EtcdVersion, "the script names the version only through versions.env")
}

func TestLookupReadsKeyValueLines(t *testing.T) {
	env := strings.Join([]string{"# comment", "", "A=1", "B=two", "C="}, "\n")
	v, err := lookup(env, "B")
	require.NoError(t, err)
	assert.Equal(t, "two", v)
	_, err = lookup(env, "C")
	assert.Error(t, err, "an empty value is missing")
	_, err = lookup(env, "D")
	assert.Error(t, err)
}
