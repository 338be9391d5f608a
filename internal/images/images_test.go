package images_test

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kerf-dev/kerf/internal/images"
	"github.com/kerf-dev/kerf/internal/kube"
)

var (
	outDir    string
	buildOnce sync.Once
	built     []images.Archive
	buildErr  error
)

func TestMain(m *testing.M) {
	var err error
	if outDir, err = os.MkdirTemp("", "kerf-images-test"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	_ = os.RemoveAll(outDir)
	os.Exit(code)
}

func repoRoot(t testing.TB) string {
	t.Helper()
	root, err := kube.RepoRoot()
	require.NoError(t, err)
	return root
}

// archives builds Kerf's images once for the package.
func archives(t *testing.T) []images.Archive {
	t.Helper()
	buildOnce.Do(func() {
		built, buildErr = images.Build(context.Background(), images.Options{RepoRoot: repoRoot(t), OutDir: outDir})
	})
	require.NoError(t, buildErr)
	require.Len(t, built, len(images.Kerf))
	return built
}

func TestArchivesHoldOneStaticBinaryWithEntrypointAndUser(t *testing.T) {
	for i, a := range archives(t) {
		want := images.Kerf[i]
		t.Run(want.Ref, func(t *testing.T) {
			assert.Equal(t, want.Ref, a.Ref)
			tag, err := name.NewTag(a.Ref)
			require.NoError(t, err)
			img, err := tarball.ImageFromPath(a.Path, &tag)
			require.NoError(t, err, "the archive holds %s", a.Ref)
			cf, err := img.ConfigFile()
			require.NoError(t, err)
			assert.Equal(t, []string{"/usr/local/bin/" + want.Command}, cf.Config.Entrypoint)
			assert.Equal(t, want.User, cf.Config.User)
			assert.Equal(t, "linux", cf.OS)
			layers, err := img.Layers()
			require.NoError(t, err)
			require.Len(t, layers, 1)

			rc, err := layers[0].Uncompressed()
			require.NoError(t, err)
			defer rc.Close()
			files := map[string]*tar.Header{}
			var content []byte
			tr := tar.NewReader(rc)
			for {
				h, err := tr.Next()
				if errors.Is(err, io.EOF) {
					break
				}
				require.NoError(t, err)
				files[h.Name] = h
				if h.Name == "usr/local/bin/"+want.Command {
					content, err = io.ReadAll(tr)
					require.NoError(t, err)
				}
			}
			bin, err := os.ReadFile(filepath.Join(outDir, "bin", want.Command))
			require.NoError(t, err)
			assert.True(t, bytes.Equal(bin, content), "the layer holds the built binary")
			require.Contains(t, files, "usr/local/bin/"+want.Command)
			assert.EqualValues(t, 0o755, files["usr/local/bin/"+want.Command].Mode&0o7777)
			assert.EqualValues(t, 0o1777, files["tmp/"].Mode&0o7777)
			// CGO_ENABLED=0: no ELF interpreter, so the empty image runs it.
			assert.False(t, bytes.Contains(bin[:min(len(bin), 4096)], []byte("ld-linux")), "the binary is static")
		})
	}
}

func TestBuildKeepsArchivesWhoseBinaryDidNotChange(t *testing.T) {
	first := archives(t)
	stamps := map[string]time.Time{}
	for _, a := range first {
		fi, err := os.Stat(a.Path)
		require.NoError(t, err)
		stamps[a.Path] = fi.ModTime()
	}
	again, err := images.Build(context.Background(), images.Options{RepoRoot: repoRoot(t), OutDir: outDir})
	require.NoError(t, err)
	for _, a := range again {
		assert.False(t, a.Built, "%s rebuilt", a.Ref)
		fi, err := os.Stat(a.Path)
		require.NoError(t, err)
		assert.Equal(t, stamps[a.Path], fi.ModTime(), "%s rewritten", a.Path)
	}

	// A changed image (here its user) is rebuilt.
	pause := images.Kerf[0]
	pause.User = "1234:1234"
	changed, err := images.Build(context.Background(), images.Options{RepoRoot: repoRoot(t), OutDir: t.TempDir(), Images: []images.Image{pause}})
	require.NoError(t, err)
	require.Len(t, changed, 1)
	assert.True(t, changed[0].Built)
	again, err = images.Build(context.Background(), images.Options{RepoRoot: repoRoot(t), OutDir: filepath.Dir(changed[0].Path), Images: []images.Image{images.Kerf[0]}})
	require.NoError(t, err)
	assert.True(t, again[0].Built, "the user changed back: rebuilt")
}

func TestBuildRefusesMissingOptions(t *testing.T) {
	_, err := images.Build(context.Background(), images.Options{OutDir: t.TempDir()})
	assert.ErrorContains(t, err, "repoRoot")
}

// containerd is a containerd of its own (socket, root and state in a
// temporary directory), stopped when the test ends.
type containerd struct {
	sock string
}

func startContainerd(t *testing.T) *containerd {
	t.Helper()
	if uid := os.Geteuid(); uid != 0 {
		t.Skipf("needs root to run containerd: running as uid %d", uid)
	}
	bin, err := exec.LookPath("containerd")
	if err != nil {
		t.Skipf("containerd is not installed (hack/apt.sh installs it): %v", err)
	}
	if _, err := exec.LookPath("ctr"); err != nil {
		t.Skipf("ctr is not installed: %v", err)
	}
	dir, err := os.MkdirTemp("", "kerf-ctrd")
	require.NoError(t, err)
	t.Cleanup(func() {
		// Unpacked snapshots may be mounted; containerd unmounts its own.
		_ = os.RemoveAll(dir)
	})
	c := &containerd{sock: filepath.Join(dir, "containerd.sock")}
	cfg := fmt.Sprintf(`version = 2
root = %q
state = %q
disabled_plugins = ["io.containerd.grpc.v1.cri"]
[grpc]
  address = %q
[ttrpc]
  address = %q
`, filepath.Join(dir, "root"), filepath.Join(dir, "state"), c.sock, c.sock+".ttrpc")
	require.NoError(t, os.WriteFile(filepath.Join(dir, "config.toml"), []byte(cfg), 0o600))
	var logs bytes.Buffer
	cmd := exec.Command(bin, "--config", filepath.Join(dir, "config.toml"))
	cmd.Stdout, cmd.Stderr = &logs, &logs
	require.NoError(t, cmd.Start())
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("containerd logs:\n%s", logs.String())
		}
	})
	require.Eventually(t, func() bool {
		return exec.Command("ctr", "--address", c.sock, "version").Run() == nil
	}, 20*time.Second, 100*time.Millisecond, "containerd did not start:\n%s", &logs)
	return c
}

func (c *containerd) ctr(t *testing.T, args ...string) (string, error) {
	t.Helper()
	out, err := exec.Command("ctr", append([]string{"--address", c.sock, "--namespace", "k8s.io"}, args...)...).CombinedOutput()
	return string(out), err
}

func TestContainerdImportsAndRunsTheArchives(t *testing.T) {
	all := archives(t)
	c := startContainerd(t)
	for _, a := range all {
		out, err := c.ctr(t, "images", "import", a.Path)
		require.NoError(t, err, "ctr images import %s:\n%s", a.Path, out)
	}
	out, err := c.ctr(t, "images", "ls", "-q")
	require.NoError(t, err, out)
	listed := strings.Fields(out)
	for _, a := range all {
		assert.Contains(t, listed, a.Ref)
	}

	// The imported workload image runs under runc as its nonroot user and
	// exits with the code it was told.
	id := fmt.Sprintf("kerf-images-test-%d", os.Getpid())
	out, err = c.ctr(t, "run", "--rm", "kerf.local/kerf-workload:dev", id,
		"/usr/local/bin/kerf-workload", "--crash-after=50ms", "--exit-code=3", "--listen=")
	var ee *exec.ExitError
	require.True(t, errors.As(err, &ee), "ctr run: %v\n%s", err, out)
	assert.Equal(t, 3, ee.ExitCode(), out)
}

// TestTheHubImageIsNonRootWithItsBinary checks kerf-hub's image without
// building anything: in the list as manifests/hub names it, run as
// nonroot (the Deployment's runAsNonRoot needs a numeric user), its binary
// at the entrypoint and a /tmp for SQLite's temporary files.
func TestTheHubImageIsNonRootWithItsBinary(t *testing.T) {
	var hub images.Image
	for _, img := range images.Kerf {
		if img.Command == "kerf-hub" {
			hub = img
		}
	}
	require.Equal(t, "kerf.local/kerf-hub:dev", hub.Ref, "kerf-hub is one of Kerf's images")
	assert.Equal(t, images.NonRoot, hub.User)
	img, err := images.NewImage(hub, []byte("\x7fELF not really"))
	require.NoError(t, err)
	cf, err := img.ConfigFile()
	require.NoError(t, err)
	assert.Equal(t, []string{"/usr/local/bin/kerf-hub"}, cf.Config.Entrypoint)
	assert.Equal(t, "65532:65532", cf.Config.User)
	layers, err := img.Layers()
	require.NoError(t, err)
	require.Len(t, layers, 1)
	rc, err := layers[0].Uncompressed()
	require.NoError(t, err)
	defer rc.Close()
	names := map[string]int64{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err)
		names[h.Name] = h.Mode & 0o7777
	}
	assert.Equal(t, map[string]int64{"usr/": 0o755, "usr/local/": 0o755, "usr/local/bin/": 0o755, "tmp/": 0o1777, "usr/local/bin/kerf-hub": 0o755}, names)
}
