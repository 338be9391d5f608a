//go:build ignore

// Builds the release of kubectl kerf: the binary for each platform krew
// installs it on (linux and darwin, amd64 and arm64), each packed with the
// project's LICENSE as kubectl-kerf_<os>_<arch>.tar.gz, their SHA-256 in
// checksums.txt (sha256sum's format), and the krew manifest kerf.yaml made
// from plugins/kerf.yaml.tmpl with the version, the archives' URLs and
// their SHA-256. `make release-plugin VERSION=v0.1.0` runs it from the
// repository root:
//
//	go run hack/release-plugin.go -version v0.1.0 [-out bin/release] [-license LICENSE]
//	    [-base-url https://github.com/kerf-dev/kerf/releases/download]
//
// Nothing is downloaded or uploaded: upload the archives to the release
// named by the version, then submit kerf.yaml to krew-index (or install
// it: kubectl krew install --manifest=bin/release/kerf.yaml
// --archive=bin/release/kubectl-kerf_linux_amd64.tar.gz). The archives
// are reproducible: the same sources give the same bytes and SHA-256.
package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"text/template"
	"time"
)

// platform is one os/arch krew installs the plugin on.
type platform struct {
	OS, Arch string
	// URI and Sha256 are its archive's address and digest.
	URI, Sha256 string
}

// platforms are the release's, in the manifest's order.
var platforms = []platform{
	{OS: "linux", Arch: "amd64"},
	{OS: "linux", Arch: "arm64"},
	{OS: "darwin", Arch: "amd64"},
	{OS: "darwin", Arch: "arm64"},
}

// version is krew's: v and semver, a pre-release allowed.
var version = regexp.MustCompile(`^v[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$`)

// archiveTime is every archive entry's modification time: fixed, so that
// the archives and their SHA-256 depend on the contents only.
var archiveTime = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "release-plugin:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("release-plugin", flag.ContinueOnError)
	ver := fs.String("version", "", "the release's tag, such as v0.1.0 (required)")
	out := fs.String("out", filepath.Join("bin", "release"), "directory for the archives, checksums.txt and kerf.yaml")
	license := fs.String("license", "LICENSE", "the license file packed into each archive")
	baseURL := fs.String("base-url", "https://github.com/kerf-dev/kerf/releases/download", "where the releases' archives are: <base-url>/<version>/<archive>")
	tmpl := fs.String("template", filepath.Join("plugins", "kerf.yaml.tmpl"), "the krew manifest's template")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if !version.MatchString(*ver) {
		return fmt.Errorf("-version %q: want v<major>.<minor>.<patch>, such as v0.1.0", *ver)
	}
	if !strings.HasPrefix(*baseURL, "https://") {
		return fmt.Errorf("-base-url %q: krew wants https", *baseURL)
	}
	lic, err := os.ReadFile(*license)
	if errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("-license %s: no such file: each archive ships the project's license (add it at the repository root, or name it)", *license)
	}
	if err != nil {
		return fmt.Errorf("-license: %w", err)
	}
	if len(bytes.TrimSpace(lic)) == 0 {
		return fmt.Errorf("-license %s: empty", *license)
	}
	t, err := template.New(filepath.Base(*tmpl)).Option("missingkey=error").ParseFiles(*tmpl)
	if err != nil {
		return fmt.Errorf("-template: %w", err)
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return err
	}

	var sums strings.Builder
	rel := make([]platform, len(platforms))
	for i, p := range platforms {
		bin, err := build(p, filepath.Join(*out, "build", p.OS+"_"+p.Arch))
		if err != nil {
			return err
		}
		name := "kubectl-kerf_" + p.OS + "_" + p.Arch + ".tar.gz"
		archive, err := pack(bin, lic)
		if err != nil {
			return fmt.Errorf("pack %s: %w", name, err)
		}
		if err := os.WriteFile(filepath.Join(*out, name), archive, 0o644); err != nil {
			return err
		}
		sum := sha256.Sum256(archive)
		p.Sha256 = hex.EncodeToString(sum[:])
		p.URI = strings.TrimSuffix(*baseURL, "/") + "/" + *ver + "/" + name
		rel[i] = p
		fmt.Fprintf(&sums, "%s  %s\n", p.Sha256, name)
		fmt.Printf("%s  %s (%d bytes)\n", p.Sha256, name, len(archive))
	}
	if err := os.WriteFile(filepath.Join(*out, "checksums.txt"), []byte(sums.String()), 0o644); err != nil {
		return err
	}
	var manifest bytes.Buffer
	if err := t.Execute(&manifest, struct {
		Version   string
		Platforms []platform
	}{*ver, rel}); err != nil {
		return fmt.Errorf("render %s: %w", *tmpl, err)
	}
	if err := os.WriteFile(filepath.Join(*out, "kerf.yaml"), manifest.Bytes(), 0o644); err != nil {
		return err
	}
	fmt.Printf("wrote %s\n", filepath.Join(*out, "kerf.yaml"))
	return nil
}

// build compiles cmd/kubectl-kerf for p into dir and returns the binary's
// bytes: static (no cgo), without paths of this machine or symbols.
func build(p platform, dir string) ([]byte, error) {
	path := filepath.Join(dir, "kubectl-kerf")
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w -buildid=", "-o", path, "./cmd/kubectl-kerf")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+p.OS, "GOARCH="+p.Arch, "GOFLAGS=-mod=readonly")
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("go build ./cmd/kubectl-kerf for %s/%s: %w\n%s", p.OS, p.Arch, err, out)
	}
	return os.ReadFile(path)
}

// pack is the .tar.gz of the binary kubectl-kerf and LICENSE, the only
// entries, at the archive's root (krew's files: from kubectl-kerf).
func pack(bin, license []byte) ([]byte, error) {
	var buf bytes.Buffer
	gz, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if err != nil {
		return nil, err
	}
	tw := tar.NewWriter(gz)
	for _, f := range []struct {
		name string
		mode int64
		data []byte
	}{{"kubectl-kerf", 0o755, bin}, {"LICENSE", 0o644, license}} {
		hdr := &tar.Header{Name: f.name, Mode: f.mode, Size: int64(len(f.data)), ModTime: archiveTime, Typeflag: tar.TypeReg, Format: tar.FormatUSTAR}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := gz.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
