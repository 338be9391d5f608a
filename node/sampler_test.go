package node

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kerf-dev/kerf/cgroup"
	"github.com/kerf-dev/kerf/node/report"
)

// fixtureTree is a v1 cpu hierarchy of plain files under a temporary
// directory; it needs no root.
type fixtureTree struct {
	h   *cgroup.Hierarchy
	dir string
}

func newFixtureTree(t *testing.T) *fixtureTree {
	dir := t.TempDir()
	return &fixtureTree{
		dir: dir,
		h: &cgroup.Hierarchy{Mode: cgroup.ModeLegacy, Mounts: []cgroup.Mount{
			{Path: dir, Root: "/", Version: 1, Controllers: []string{"cpu", "cpuacct"}},
		}},
	}
}

// write writes a v1 cpu.stat for cgroupPath.
func (f *fixtureTree) write(t *testing.T, cgroupPath string, periods, throttled uint64, throttledNS int64) {
	t.Helper()
	f.writeRaw(t, cgroupPath, fmt.Sprintf("nr_periods %d\nnr_throttled %d\nthrottled_time %d\nnr_bursts 0\nburst_time 0\n",
		periods, throttled, throttledNS))
}

func (f *fixtureTree) writeRaw(t *testing.T, cgroupPath, content string) {
	t.Helper()
	dir := filepath.Join(f.dir, cgroupPath)
	require.NoError(t, os.MkdirAll(dir, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "cpu.stat"), []byte(content), 0o644))
}

func container(name, cgroupPath string) Container {
	return Container{
		Namespace: "default", Pod: "web-0", PodUID: "0b5e4a1c-7a8f-4f3c-9d2e-1a2b3c4d5e6f",
		Name: name, ContainerID: "containerd://abc", QoS: cgroup.QoSBurstable, CgroupPath: cgroupPath,
	}
}

func keysOf(ss []report.Sample) []string {
	var out []string
	for _, s := range ss {
		out = append(out, s.Key.Name)
	}
	slices.Sort(out)
	return out
}

func TestSamplerKeepsLatestSampleOfEachContainer(t *testing.T) {
	f := newFixtureTree(t)
	f.write(t, "/kubepods/a", 10, 2, 3_000_000)
	f.write(t, "/kubepods/b", 0, 0, 0)
	s := NewSampler(f.h)
	defer s.Close()
	require.NoError(t, s.Set([]Container{container("a", "/kubepods/a"), container("b", "/kubepods/b")}))

	at := time.Unix(1000, 0)
	p := s.Sample(at)
	assert.Equal(t, Pass{Read: 2, Changed: 2}, p)
	got := s.Latest(nil)
	slices.SortFunc(got, func(x, y report.Sample) int { return strings.Compare(x.Key.Name, y.Key.Name) })
	uid := container("", "").PodUID
	assert.Equal(t, []report.Sample{
		{Key: report.ContainerKey{PodUID: uid, Name: "a"}, At: at, Periods: 10, Throttled: 2, ThrottledTime: 3 * time.Millisecond},
		{Key: report.ContainerKey{PodUID: uid, Name: "b"}, At: at},
	}, got)
	assert.Equal(t, SamplerStats{Samples: 2, Tracked: 2}, s.Stats())
}

func TestSamplerReportsOnlyChangedSamples(t *testing.T) {
	f := newFixtureTree(t)
	for _, n := range []string{"a", "b", "c"} {
		f.write(t, "/kubepods/"+n, 5, 1, 100)
	}
	s := NewSampler(f.h)
	defer s.Close()
	require.NoError(t, s.Set([]Container{
		container("a", "/kubepods/a"), container("b", "/kubepods/b"), container("c", "/kubepods/c"),
	}))

	tests := []struct {
		name    string
		change  func()
		changed []string
	}{
		{"first pass reports every container", func() {}, []string{"a", "b", "c"}},
		{"nothing changed", func() {}, nil},
		{"periods of one", func() { f.write(t, "/kubepods/b", 6, 1, 100) }, []string{"b"}},
		{"throttled time of another", func() { f.write(t, "/kubepods/c", 5, 1, 200) }, []string{"c"}},
		{"nothing again", func() {}, nil},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.change()
			p := s.Sample(time.Unix(int64(i), 0))
			assert.Equal(t, len(tt.changed), p.Changed)
			assert.Equal(t, tt.changed, keysOf(s.Changed(nil)))
			assert.Len(t, s.Latest(nil), 3)
		})
	}
}

func TestSamplerSetReplacesTheTrackedSet(t *testing.T) {
	f := newFixtureTree(t)
	for _, n := range []string{"a", "b", "c", "d"} {
		f.write(t, "/kubepods/"+n, 1, 0, 0)
	}
	s := NewSampler(f.h)
	defer s.Close()
	require.NoError(t, s.Set([]Container{container("a", "/kubepods/a"), container("b", "/kubepods/b"), container("c", "/kubepods/c")}))
	s.Sample(time.Unix(1, 0))

	require.NoError(t, s.Set([]Container{container("c", "/kubepods/c"), container("d", "/kubepods/d")}))
	assert.Equal(t, []string{"c"}, keysOf(s.Latest(nil)), "a kept container keeps its sample; a new one has none yet")
	assert.Equal(t, 2, s.Stats().Tracked)
	p := s.Sample(time.Unix(2, 0))
	assert.Equal(t, Pass{Read: 2, Changed: 1}, p, "only d is new")
	assert.Equal(t, []string{"c", "d"}, keysOf(s.Latest(nil)))

	s.Remove(report.ContainerKey{PodUID: container("", "").PodUID, Name: "c"})
	assert.Equal(t, []string{"d"}, keysOf(s.Latest(nil)))
	require.NoError(t, s.Add(container("a", "/kubepods/a")))
	s.Sample(time.Unix(3, 0))
	assert.Equal(t, []string{"a", "d"}, keysOf(s.Latest(nil)))
	assert.Equal(t, 2, s.Stats().Tracked)
}

func TestSamplerSetLeavesOutContainersItCannotSample(t *testing.T) {
	f := newFixtureTree(t)
	f.write(t, "/kubepods/a", 1, 0, 0)
	s := NewSampler(f.h)
	defer s.Close()
	noPath := container("nopath", "")
	err := s.Set([]Container{container("a", "/kubepods/a"), noPath})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "default/web-0/nopath: cgroup path must be set")
	assert.Equal(t, 1, s.Stats().Tracked)
}

func TestSamplerCountsReadErrorsAndReadsTheRest(t *testing.T) {
	f := newFixtureTree(t)
	f.write(t, "/kubepods/a", 1, 0, 0)
	f.writeRaw(t, "/kubepods/bad", "nr_periods x\n")
	s := NewSampler(f.h)
	defer s.Close()
	require.NoError(t, s.Set([]Container{container("a", "/kubepods/a"), container("bad", "/kubepods/bad")}))

	p := s.Sample(time.Unix(1, 0))
	assert.Equal(t, 1, p.Read)
	assert.Equal(t, 1, p.Errors)
	require.Error(t, p.Err)
	assert.ErrorIs(t, p.Err, cgroup.ErrMalformed)
	assert.Equal(t, []string{"a"}, keysOf(s.Latest(nil)))

	f.write(t, "/kubepods/bad", 3, 0, 0)
	p = s.Sample(time.Unix(2, 0))
	assert.Equal(t, Pass{Read: 2, Changed: 1}, p, "a fixed file is read again")
	assert.Equal(t, SamplerStats{Samples: 3, ReadErrors: 1, Tracked: 2}, s.Stats())
}

// TestSamplerCountsAContainerWhoseCgroupWasNeverFound: a container whose
// cgroup is not there at its first open is dropped and counted apart from
// the gone ones, with its path, since a wrong layout looks just so. Before,
// it counted as gone, and an agent with the wrong --cgroup-driver reported
// nothing and said nothing.
func TestSamplerCountsAContainerWhoseCgroupWasNeverFound(t *testing.T) {
	f := newFixtureTree(t)
	s := NewSampler(f.h)
	defer s.Close()
	require.NoError(t, s.Set([]Container{container("a", "/kubepods/missing")}))
	p := s.Sample(time.Unix(1, 0))
	assert.Equal(t, Pass{NotFound: 1, NotFoundPath: "/kubepods/missing"}, p)
	assert.Equal(t, Pass{}, s.Sample(time.Unix(2, 0)), "counted once")
	require.NoError(t, s.Set(nil))
	assert.Equal(t, SamplerStats{NotFound: 1}, s.Stats())
}

func TestSamplerPassDoesNotAllocate(t *testing.T) {
	f := newFixtureTree(t)
	var cs []Container
	for i := range 50 {
		p := fmt.Sprintf("/kubepods/c%02d", i)
		f.write(t, p, uint64(i), 0, 0)
		cs = append(cs, container(fmt.Sprintf("c%02d", i), p))
	}
	s := NewSampler(f.h)
	defer s.Close()
	require.NoError(t, s.Set(cs))
	s.Sample(time.Now())
	now := time.Now()
	assert.Zero(t, testing.AllocsPerRun(100, func() { s.Sample(now) }))
	buf := make([]report.Sample, 0, 64)
	assert.Zero(t, testing.AllocsPerRun(100, func() { buf = s.Changed(buf[:0]) }))
}
