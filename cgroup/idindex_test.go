package cgroup

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestIDIndexMapsEveryDirectoryOfTheFixtureTree(t *testing.T) {
	h, _ := detectFixture(t, "legacy-systemd-docker")
	mem, ok := h.ControllerPath("memory")
	require.True(t, ok)
	kubepods, err := Layout{Driver: DriverSystemd}.KubepodsDir()
	require.NoError(t, err)
	dir := filepath.Join(mem, kubepods)

	x, err := NewIDIndex(dir)
	require.NoError(t, err)
	var dirs int
	require.NoError(t, filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		require.NoError(t, err)
		if !d.IsDir() {
			return nil
		}
		dirs++
		id, err := CgroupID(p)
		require.NoError(t, err)
		got, ok := x.Lookup(id)
		assert.True(t, ok, p)
		assert.Equal(t, p, got)
		return nil
	}))
	assert.Equal(t, dirs, x.Len())
	assert.Equal(t, 7, dirs)

	cg, err := Layout{Driver: DriverSystemd}.ContainerDir(PodCgroup{UID: uidB, QoS: QoSBurstable}, "docker://"+fixtureApp)
	require.NoError(t, err)
	id, err := CgroupID(filepath.Join(mem, cg))
	require.NoError(t, err)
	p, ok := x.Lookup(id)
	require.True(t, ok)
	uid, cid, ok := ParseContainerPath(p)
	require.True(t, ok)
	assert.Equal(t, uidB, uid)
	assert.Equal(t, fixtureApp, cid)
}

func TestIDIndexFindsCgroupCreatedAfterTheWalkOnAMiss(t *testing.T) {
	dir := t.TempDir()
	x, err := NewIDIndex(dir)
	require.NoError(t, err)
	assert.Equal(t, 1, x.Len())

	child := filepath.Join(dir, "kubepods", "pod"+uidB)
	require.NoError(t, os.MkdirAll(child, 0o755))
	id, err := CgroupID(child)
	require.NoError(t, err)
	p, ok := x.Lookup(id)
	assert.True(t, ok)
	assert.Equal(t, child, p)
	assert.Equal(t, 3, x.Len())
}

// TestIDIndexNamesARemovedCgroupForItsRetention: a cgroup a walk finds
// removed is still named (a kill read after its container restarted),
// until IDRetention has passed; and at most MaxGoneIDs are kept, the
// oldest dropped first.
func TestIDIndexNamesARemovedCgroupForItsRetention(t *testing.T) {
	dir := t.TempDir()
	child := filepath.Join(dir, "gone")
	require.NoError(t, os.Mkdir(child, 0o755))
	id, err := CgroupID(child)
	require.NoError(t, err)
	x, err := NewIDIndex(dir)
	require.NoError(t, err)
	now := time.Now()
	x.now = func() time.Time { return now }
	_, ok := x.Lookup(id)
	require.True(t, ok)

	require.NoError(t, os.Remove(child))
	require.NoError(t, x.Refresh())
	assert.Equal(t, 1, x.Len(), "the walk found only the root")
	p, ok := x.Lookup(id)
	assert.True(t, ok, "removed, still named")
	assert.Equal(t, child, p)

	now = now.Add(IDRetention)
	require.NoError(t, x.Refresh())
	_, ok = x.Lookup(id)
	assert.True(t, ok, "named for IDRetention")
	now = now.Add(time.Second)
	require.NoError(t, x.Refresh())
	_, ok = x.Lookup(id)
	assert.False(t, ok, "not past it")

	at := time.Now()
	before := map[uint64]string{}
	for i := range uint64(MaxGoneIDs + 2) {
		before[i] = fmt.Sprintf("/c%d", i)
	}
	gone := keepGone(map[uint64]goneCgroup{1 << 40: {path: "/oldest", at: at.Add(-time.Minute)}}, before, map[uint64]string{}, at)
	assert.Len(t, gone, MaxGoneIDs, "bounded")
	assert.NotContains(t, gone, uint64(1<<40), "the oldest dropped first")
	gone = keepGone(gone, map[uint64]string{}, map[uint64]string{5: "/again"}, at)
	assert.NotContains(t, gone, uint64(5), "an id found again is live, not removed")
}

func TestIDIndexFollowsASymlinkedRoot(t *testing.T) {
	dir := t.TempDir()
	real := filepath.Join(dir, "cpu,cpuacct")
	require.NoError(t, os.MkdirAll(filepath.Join(real, "kubepods"), 0o755))
	link := filepath.Join(dir, "cpu")
	require.NoError(t, os.Symlink("cpu,cpuacct", link))
	x, err := NewIDIndex(link)
	require.NoError(t, err)
	id, err := CgroupID(filepath.Join(real, "kubepods"))
	require.NoError(t, err)
	p, ok := x.Lookup(id)
	assert.True(t, ok)
	assert.Equal(t, filepath.Join(link, "kubepods"), p)
}

func TestIDIndexReportsAMissingRootAsGone(t *testing.T) {
	_, err := NewIDIndex(filepath.Join(t.TempDir(), "nope"))
	assert.ErrorIs(t, err, ErrGone)
	_, err = CgroupID(filepath.Join(t.TempDir(), "nope"))
	assert.ErrorIs(t, err, ErrGone)
}

func TestIDIndexMissAfterRootRemovedIsAMiss(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "root")
	require.NoError(t, os.Mkdir(dir, 0o755))
	x, err := NewIDIndex(dir)
	require.NoError(t, err)
	require.NoError(t, os.Remove(dir))
	_, ok := x.Lookup(1)
	assert.False(t, ok)
	assert.ErrorIs(t, x.Refresh(), ErrGone)
}

func TestIDIndexIsSafeForConcurrentLookups(t *testing.T) {
	dir := t.TempDir()
	for _, n := range []string{"a", "b", "c"} {
		require.NoError(t, os.Mkdir(filepath.Join(dir, n), 0o755))
	}
	x, err := NewIDIndex(dir)
	require.NoError(t, err)
	id, err := CgroupID(filepath.Join(dir, "b"))
	require.NoError(t, err)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 50 {
				p, ok := x.Lookup(id)
				assert.True(t, ok)
				assert.Equal(t, filepath.Join(dir, "b"), p)
				x.Lookup(0) // a miss: walks again
			}
		})
	}
	wg.Wait()
}
