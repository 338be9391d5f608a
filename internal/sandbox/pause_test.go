package sandbox

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// writePauseArchive builds testdata/pause as a static binary and writes a
// docker-archive tar that tags it PauseImageRef, in dir. It stands in for
// package internal/images' pause image until that exists; ctr imports
// docker archives as they are.
func writePauseArchive(t testing.TB, dir string) string {
	t.Helper()
	bin := filepath.Join(dir, "pause")
	build := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", bin, "./testdata/pause")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "build pause: %s", out)
	exe, err := os.ReadFile(bin)
	require.NoError(t, err)

	var layer bytes.Buffer
	tw := tar.NewWriter(&layer)
	require.NoError(t, tw.WriteHeader(&tar.Header{Name: "pause", Mode: 0o755, Size: int64(len(exe)), ModTime: time.Unix(0, 0), Typeflag: tar.TypeReg}))
	_, err = tw.Write(exe)
	require.NoError(t, err)
	require.NoError(t, tw.Close())
	layerSum := sha256.Sum256(layer.Bytes())
	layerID := hex.EncodeToString(layerSum[:])

	config, err := json.Marshal(map[string]any{
		"architecture": "amd64",
		"os":           "linux",
		"config":       map[string]any{"Entrypoint": []string{"/pause"}},
		"rootfs":       map[string]any{"type": "layers", "diff_ids": []string{"sha256:" + layerID}},
	})
	require.NoError(t, err)
	configSum := sha256.Sum256(config)
	configName := hex.EncodeToString(configSum[:]) + ".json"
	manifest, err := json.Marshal([]map[string]any{{
		"Config":   configName,
		"RepoTags": []string{PauseImageRef},
		"Layers":   []string{layerID + "/layer.tar"},
	}})
	require.NoError(t, err)

	archive := filepath.Join(dir, "pause.tar")
	f, err := os.Create(archive)
	require.NoError(t, err)
	defer f.Close()
	aw := tar.NewWriter(f)
	for _, e := range []struct {
		name string
		data []byte
	}{{layerID + "/layer.tar", layer.Bytes()}, {configName, config}, {"manifest.json", manifest}} {
		require.NoError(t, aw.WriteHeader(&tar.Header{Name: e.name, Mode: 0o644, Size: int64(len(e.data)), ModTime: time.Unix(0, 0), Typeflag: tar.TypeReg}))
		_, err := aw.Write(e.data)
		require.NoError(t, err)
	}
	require.NoError(t, aw.Close())
	return archive
}
