// Package plugins_test checks the release of kubectl kerf that
// hack/release-plugin.go makes (make release-plugin): four real builds, one
// archive each with the binary and LICENSE, and a krew manifest whose
// SHA-256s are the archives' and which is plugins/kerf.yaml but for the
// version, the URLs and the digests. Nothing goes over the network.
package plugins_test

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"debug/elf"
	"debug/macho"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"
)

// plugin is krew's Plugin (index/v1alpha2), every field this manifest
// uses; parsed strictly, so a misspelt or unknown field fails.
type plugin struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name string `json:"name"`
	} `json:"metadata"`
	Spec struct {
		Version          string     `json:"version"`
		Homepage         string     `json:"homepage"`
		ShortDescription string     `json:"shortDescription"`
		Description      string     `json:"description"`
		Caveats          string     `json:"caveats"`
		Platforms        []platform `json:"platforms"`
	} `json:"spec"`
}

type platform struct {
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
}

func readPlugin(t *testing.T, path string) plugin {
	t.Helper()
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	var p plugin
	require.NoError(t, yaml.UnmarshalStrict(raw, &p), "%s is not a krew Plugin", path)
	return p
}

// release runs hack/release-plugin.go from the repository root.
func release(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command("go", append([]string{"run", "./hack/release-plugin.go"}, args...)...)
	cmd.Dir = ".."
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// entries reads a .tar.gz: each regular file's mode and contents by name.
func entries(t *testing.T, path string) (modes map[string]int64, files map[string][]byte) {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	gz, err := gzip.NewReader(f)
	require.NoError(t, err, "%s is not gzip", path)
	tr := tar.NewReader(gz)
	modes, files = map[string]int64{}, map[string][]byte{}
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err, "%s is not a tar", path)
		require.Equal(t, byte(tar.TypeReg), hdr.Typeflag, "%s: %s is not a regular file", path, hdr.Name)
		data, err := io.ReadAll(io.LimitReader(tr, 256<<20))
		require.NoError(t, err)
		modes[hdr.Name], files[hdr.Name] = hdr.Mode, data
	}
	return modes, files
}

// binaryPlatform is the os/arch a binary is for, read from its ELF or
// Mach-O header.
func binaryPlatform(t *testing.T, bin []byte) string {
	t.Helper()
	if f, err := elf.NewFile(bytes.NewReader(bin)); err == nil {
		switch f.Machine {
		case elf.EM_X86_64:
			return "linux_amd64"
		case elf.EM_AARCH64:
			return "linux_arm64"
		}
		return "linux_" + f.Machine.String()
	}
	if f, err := macho.NewFile(bytes.NewReader(bin)); err == nil {
		switch f.Cpu {
		case macho.CpuAmd64:
			return "darwin_amd64"
		case macho.CpuArm64:
			return "darwin_arm64"
		}
		return "darwin_" + f.Cpu.String()
	}
	return "neither ELF nor Mach-O"
}

func TestReleaseRefusesAReleaseWithoutItsLicenseOrAVersion(t *testing.T) {
	out, err := release(t, "-version", "v1.2.3", "-out", t.TempDir(), "-license", filepath.Join(t.TempDir(), "LICENSE"))
	require.Error(t, err, out)
	assert.Contains(t, out, "-license")
	assert.Contains(t, out, "no such file")
	out, err = release(t, "-version", "1.2.3", "-out", t.TempDir())
	require.Error(t, err, out)
	assert.Contains(t, out, `-version "1.2.3"`)
}

// TestReleaseWritesArchivesAndAKrewManifestThatAgree builds the release
// (four cross builds: a few minutes cold, seconds from the build cache)
// and checks what krew checks when it installs: each platform's archive
// has the SHA-256 the manifest says and holds the files it names; and more:
// each binary is for its platform, the host's runs, and a second release
// of the same sources is the same bytes.
func TestReleaseWritesArchivesAndAKrewManifestThatAgree(t *testing.T) {
	if os.Getenv("KERF_TEST_RELEASE") == "" {
		// make test leaves it out: four cross-builds of kubectl-kerf take
		// minutes on a cold build cache (29 min on a loaded 2-core machine).
		t.Skip("builds kubectl-kerf for four platforms: make test-release runs it (KERF_TEST_RELEASE=1)")
	}
	dir := t.TempDir()
	license := filepath.Join(dir, "LICENSE")
	// The repository has no LICENSE yet; any text shows it is packed.
	licenseText := []byte("test license text for the release check\n")
	require.NoError(t, os.WriteFile(license, licenseText, 0o644))
	const version = "v1.2.3"
	const base = "https://example.test/kerf/releases/download"
	outDir := filepath.Join(dir, "release")
	out, err := release(t, "-version", version, "-out", outDir, "-license", license, "-base-url", base)
	require.NoError(t, err, out)
	t.Logf("release-plugin:\n%s", out)

	got := readPlugin(t, filepath.Join(outDir, "kerf.yaml"))
	assert.Equal(t, "krew.googlecontainertools.github.com/v1alpha2", got.APIVersion)
	assert.Equal(t, "Plugin", got.Kind)
	assert.Equal(t, "kerf", got.Metadata.Name)
	assert.Equal(t, version, got.Spec.Version)

	sums, err := os.ReadFile(filepath.Join(outDir, "checksums.txt"))
	require.NoError(t, err)
	listed := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(sums))
	for sc.Scan() {
		sum, name, ok := strings.Cut(sc.Text(), "  ")
		require.True(t, ok, "checksums.txt line %q", sc.Text())
		listed[name] = sum
	}

	seen := map[string]bool{}
	for _, p := range got.Spec.Platforms {
		key := p.Selector.MatchLabels["os"] + "_" + p.Selector.MatchLabels["arch"]
		require.Len(t, p.Selector.MatchLabels, 2, key)
		require.False(t, seen[key], "platform %s twice", key)
		seen[key] = true
		name := "kubectl-kerf_" + key + ".tar.gz"
		assert.Equal(t, base+"/"+version+"/"+name, p.URI, key)

		archive := filepath.Join(outDir, name)
		raw, err := os.ReadFile(archive)
		require.NoError(t, err, "the archive of %s", key)
		sum := sha256.Sum256(raw)
		assert.Equal(t, hex.EncodeToString(sum[:]), p.Sha256, "%s: the manifest's sha256 is not the archive's", key)
		assert.Equal(t, p.Sha256, listed[name], "%s: checksums.txt", key)

		modes, files := entries(t, archive)
		assert.ElementsMatch(t, []string{"kubectl-kerf", "LICENSE"}, keysOf(files), "%s: the archive's files", key)
		assert.Equal(t, licenseText, files["LICENSE"], key)
		assert.EqualValues(t, 0o755, modes["kubectl-kerf"], key)
		for _, f := range p.Files {
			assert.Contains(t, files, f.From, "%s: files.from %s is not in the archive", key, f.From)
			assert.Equal(t, ".", f.To, key)
		}
		assert.Equal(t, "kubectl-kerf", p.Bin, key)
		assert.Equal(t, key, binaryPlatform(t, files["kubectl-kerf"]), "%s: the binary's platform", key)

		if key == runtime.GOOS+"_"+runtime.GOARCH {
			bin := filepath.Join(dir, "kubectl-kerf")
			require.NoError(t, os.WriteFile(bin, files["kubectl-kerf"], 0o755))
			help, err := exec.Command(bin, "--help").CombinedOutput()
			require.NoError(t, err, "%s --help: %s", key, help)
			assert.Contains(t, string(help), "kubectl kerf")
		}
	}
	assert.Equal(t, map[string]bool{"linux_amd64": true, "linux_arm64": true, "darwin_amd64": true, "darwin_arm64": true}, seen)
	assert.Len(t, listed, 4, "checksums.txt")

	// plugins/kerf.yaml, the repository's manifest, is the release's but
	// for the version, the URLs and the digests.
	placeholder := readPlugin(t, "kerf.yaml")
	require.Len(t, placeholder.Spec.Platforms, len(got.Spec.Platforms))
	placeholder.Spec.Version = got.Spec.Version
	for i := range placeholder.Spec.Platforms {
		placeholder.Spec.Platforms[i].URI = got.Spec.Platforms[i].URI
		placeholder.Spec.Platforms[i].Sha256 = got.Spec.Platforms[i].Sha256
	}
	assert.Equal(t, placeholder, got, "plugins/kerf.yaml and plugins/kerf.yaml.tmpl differ beyond version, uri and sha256")

	// Reproducible: the same sources give the same archives.
	again := filepath.Join(dir, "again")
	out, err = release(t, "-version", version, "-out", again, "-license", license, "-base-url", base)
	require.NoError(t, err, out)
	sums2, err := os.ReadFile(filepath.Join(again, "checksums.txt"))
	require.NoError(t, err)
	assert.Equal(t, string(sums), string(sums2), "a second release of the same sources")
}

func keysOf[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
