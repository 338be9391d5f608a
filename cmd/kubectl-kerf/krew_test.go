package main

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"
)

// krewPlugin is the part of krew's Plugin (index/v1alpha2) the manifest
// uses.
type krewPlugin struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name string `json:"name"`
	} `json:"metadata"`
	Spec struct {
		Version          string `json:"version"`
		Homepage         string `json:"homepage"`
		ShortDescription string `json:"shortDescription"`
		Description      string `json:"description"`
		Caveats          string `json:"caveats"`
		Platforms        []struct {
			Selector struct {
				MatchLabels map[string]string `json:"matchLabels"`
			} `json:"selector"`
			URI    string `json:"uri"`
			Sha256 string `json:"sha256"`
			Files  []struct {
				From string `json:"from"`
				To   string `json:"to"`
			} `json:"files"`
			Bin string `json:"bin"`
		} `json:"platforms"`
	} `json:"spec"`
}

// TestKrewManifestCoversLinuxAndDarwinOnAmd64AndArm64 checks
// plugins/kerf.yaml against krew's rules: the file is named after the
// plugin, the version is v-prefixed semver, and each of the four platforms
// has an https archive of its own, a sha256 of 64 hex digits, the
// kubectl-kerf binary and LICENSE.
func TestKrewManifestCoversLinuxAndDarwinOnAmd64AndArm64(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "plugins", "kerf.yaml"))
	require.NoError(t, err)
	var p krewPlugin
	require.NoError(t, yaml.UnmarshalStrict(raw, &p))
	assert.Equal(t, "krew.googlecontainertools.github.com/v1alpha2", p.APIVersion)
	assert.Equal(t, "Plugin", p.Kind)
	assert.Equal(t, "kerf", p.Metadata.Name, "krew wants the manifest named after the plugin: kerf.yaml")
	assert.Regexp(t, `^v[0-9]+\.[0-9]+\.[0-9]+$`, p.Spec.Version)
	assert.NotEmpty(t, p.Spec.ShortDescription)
	assert.NotEmpty(t, p.Spec.Homepage)
	seen := map[string]bool{}
	sha := regexp.MustCompile(`^[0-9a-f]{64}$`)
	for _, pl := range p.Spec.Platforms {
		goos, arch := pl.Selector.MatchLabels["os"], pl.Selector.MatchLabels["arch"]
		key := goos + "_" + arch
		assert.False(t, seen[key], "platform %s twice", key)
		seen[key] = true
		assert.Regexp(t, `^https://.*/kubectl-kerf_`+key+`\.tar\.gz$`, pl.URI, key)
		assert.Regexp(t, sha, pl.Sha256, key)
		assert.Equal(t, "kubectl-kerf", pl.Bin, key)
		require.Len(t, pl.Files, 2, key)
		assert.Equal(t, "kubectl-kerf", pl.Files[0].From, key)
		assert.Equal(t, "LICENSE", pl.Files[1].From, key)
	}
	assert.Equal(t, map[string]bool{"linux_amd64": true, "linux_arm64": true, "darwin_amd64": true, "darwin_arm64": true}, seen)
}
