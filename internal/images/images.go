// Package images builds Kerf's container images as OCI image archives
// without Docker: each image is one layer holding one static binary, made
// with go-containerregistry and written as a docker-archive tarball that
// `ctr -n k8s.io images import` loads (docs/install.md, docs/design.md section 9).
package images

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// BinDir is where an image holds its binary.
const BinDir = "/usr/local/bin"

// NonRoot is the user and group the images of programs that need no
// privilege run as (distroless's nonroot).
const NonRoot = "65532:65532"

// Image describes one image: the command under cmd/ whose binary it holds
// and how it runs.
type Image struct {
	// Ref is the image's name, e.g. kerf.local/kerf-agent:dev.
	Ref string
	// Command is the directory under cmd/ and the binary's name.
	Command string
	// User is the image's user (uid:gid); empty means root.
	User string
}

// Entrypoint is the image's entrypoint: its binary.
func (i Image) Entrypoint() []string { return []string{BinDir + "/" + i.Command} }

// Kerf lists the images the sandbox and the manifests use. The agent runs
// as root (its DaemonSet grants BPF's capabilities); the others as nonroot.
// kerf-hub's image is the one manifests/hub deploys (docs/hub.md).
var Kerf = []Image{
	{Ref: "kerf.local/pause:1", Command: "kerf-pause", User: "65535:65535"},
	{Ref: "kerf.local/kerf-agent:dev", Command: "kerf-agent"},
	{Ref: "kerf.local/kerf-leader:dev", Command: "kerf-leader", User: NonRoot},
	{Ref: "kerf.local/kerf-workload:dev", Command: "kerf-workload", User: NonRoot},
	{Ref: "kerf.local/kerf-hub:dev", Command: "kerf-hub", User: NonRoot},
}

// Options configure Build.
type Options struct {
	// RepoRoot is the module's root directory (holding go.mod, cmd/ and
	// hack/build.sh).
	RepoRoot string
	// OutDir receives the archives, <command>.tar, and the binaries under
	// OutDir/bin.
	OutDir string
	// Images to build; nil means Kerf.
	Images []Image
	// Log, when set, receives one line per archive.
	Log *slog.Logger
}

// Archive is a built image archive.
type Archive struct {
	// Ref is the image's name inside the archive.
	Ref string
	// Path is the docker-archive tarball.
	Path string
	// Built is false when the archive was already up to date.
	Built bool
	// Size is the archive's size in bytes.
	Size int64
}

// stamp is what an archive was built from, kept beside it as
// <archive>.stamp: the archive is rebuilt when any part changes.
type stamp struct {
	Format     int      `json:"format"`
	Ref        string   `json:"ref"`
	Binary     string   `json:"binarySHA256"`
	Entrypoint []string `json:"entrypoint"`
	User       string   `json:"user"`
	Arch       string   `json:"arch"`
}

// stampFormat changes when the way images are laid out changes.
const stampFormat = 1

// Build compiles the images' binaries with hack/build.sh (static, as
// `make build` makes them) and writes one archive per image into
// opts.OutDir. An archive whose binary, name, entrypoint and user did not
// change since it was written is kept as is.
func Build(ctx context.Context, opts Options) ([]Archive, error) {
	if opts.RepoRoot == "" || opts.OutDir == "" {
		return nil, fmt.Errorf("images options: repoRoot (%q) and outDir (%q) are required", opts.RepoRoot, opts.OutDir)
	}
	imgs := opts.Images
	if imgs == nil {
		imgs = Kerf
	}
	binDir := filepath.Join(opts.OutDir, "bin")
	if err := os.MkdirAll(binDir, 0o755); err != nil {
		return nil, fmt.Errorf("create %s: %w", binDir, err)
	}
	args := []string{binDir}
	for _, img := range imgs {
		args = append(args, img.Command)
	}
	cmd := exec.CommandContext(ctx, filepath.Join(opts.RepoRoot, "hack", "build.sh"), args...)
	cmd.Dir = opts.RepoRoot
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("hack/build.sh %v: %w\n%s", args, err, out.Bytes())
	}
	var archives []Archive
	for _, img := range imgs {
		a, err := buildOne(img, filepath.Join(binDir, img.Command), opts.OutDir)
		if err != nil {
			return nil, err
		}
		if opts.Log != nil {
			opts.Log.Info("image archive", "ref", a.Ref, "path", a.Path, "built", a.Built, "bytes", a.Size)
		}
		archives = append(archives, a)
	}
	return archives, nil
}

func buildOne(img Image, binary, outDir string) (Archive, error) {
	tag, err := name.NewTag(img.Ref, name.StrictValidation)
	if err != nil {
		return Archive{}, fmt.Errorf("image ref %q: %w", img.Ref, err)
	}
	bin, err := os.ReadFile(binary)
	if err != nil {
		return Archive{}, fmt.Errorf("read binary: %w", err)
	}
	sum := sha256.Sum256(bin)
	st := stamp{Format: stampFormat, Ref: img.Ref, Binary: hex.EncodeToString(sum[:]),
		Entrypoint: img.Entrypoint(), User: img.User, Arch: runtime.GOARCH}
	want, err := json.Marshal(st)
	if err != nil {
		return Archive{}, err
	}
	path := filepath.Join(outDir, img.Command+".tar")
	stampPath := path + ".stamp"
	a := Archive{Ref: img.Ref, Path: path}
	if have, err := os.ReadFile(stampPath); err == nil && bytes.Equal(have, want) {
		if fi, err := os.Stat(path); err == nil {
			a.Size = fi.Size()
			return a, nil
		}
	}
	image, err := NewImage(img, bin)
	if err != nil {
		return Archive{}, err
	}
	// Write beside and rename, so a reader never sees half an archive and
	// an interrupted build leaves no stamp for a broken file.
	tmp := path + ".tmp"
	if err := tarball.WriteToFile(tmp, tag, image); err != nil {
		_ = os.Remove(tmp)
		return Archive{}, fmt.Errorf("write archive of %s: %w", img.Ref, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return Archive{}, fmt.Errorf("write archive of %s: %w", img.Ref, err)
	}
	if err := os.WriteFile(stampPath, want, 0o644); err != nil {
		return Archive{}, fmt.Errorf("write stamp of %s: %w", img.Ref, err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		return Archive{}, err
	}
	a.Built, a.Size = true, fi.Size()
	return a, nil
}

// epoch is every image's creation time and every file's modification time,
// so that the same binary always makes the same image digest.
var epoch = time.Unix(0, 0).UTC()

// NewImage returns img as a one-layer image holding binary at
// BinDir/<command>, with its entrypoint and user set.
func NewImage(img Image, binary []byte) (v1.Image, error) {
	layerTar, err := layerTar(img.Command, binary)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	}, tarball.WithCompressedCaching)
	if err != nil {
		return nil, fmt.Errorf("layer of %s: %w", img.Ref, err)
	}
	base, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return nil, fmt.Errorf("image %s: %w", img.Ref, err)
	}
	cf, err := base.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("config of %s: %w", img.Ref, err)
	}
	cf = cf.DeepCopy()
	cf.Architecture, cf.OS = runtime.GOARCH, "linux"
	cf.Created = v1.Time{Time: epoch}
	cf.Config.Entrypoint = img.Entrypoint()
	cf.Config.User = img.User
	cf.Config.WorkingDir = "/"
	cf.Config.Env = []string{"PATH=" + BinDir + ":/usr/bin:/bin"}
	cf.Config.Labels = map[string]string{"org.opencontainers.image.source": "https://github.com/kerf-dev/kerf"}
	out, err := mutate.ConfigFile(base, cf)
	if err != nil {
		return nil, fmt.Errorf("config of %s: %w", img.Ref, err)
	}
	return out, nil
}

// layerTar is the uncompressed layer: the directories down to BinDir, the
// binary, and a world-writable /tmp.
func layerTar(command string, binary []byte) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dir := func(name string, mode int64) error {
		return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: name, Mode: mode, ModTime: epoch, Format: tar.FormatPAX})
	}
	for _, d := range []string{"usr/", "usr/local/", "usr/local/bin/"} {
		if err := dir(d, 0o755); err != nil {
			return nil, err
		}
	}
	if err := dir("tmp/", 0o1777); err != nil {
		return nil, err
	}
	hdr := &tar.Header{Typeflag: tar.TypeReg, Name: "usr/local/bin/" + command, Mode: 0o755,
		Size: int64(len(binary)), ModTime: epoch, Format: tar.FormatPAX}
	if err := tw.WriteHeader(hdr); err != nil {
		return nil, err
	}
	if _, err := tw.Write(binary); err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("close layer: %w", err)
	}
	return buf.Bytes(), nil
}
