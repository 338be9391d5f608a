package cgroup

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Container ids and pod UIDs in the fixture trees.
const (
	fixtureApp = "a172cedcae47474b615c54d510a5d84a8dea3032e958587430b413538be3f333"
	fixtureDB  = "7bdc25d1694ef984782a16f6f1710c1c6bc83ba7a131b515baf532bea021d011"
	fixtureJob = "5e8c9902207afaeb7120430c585a445f21e92932081d64bc99f80e4925bcb002"
	uidB       = "8d7e1f52-1c3b-4a3e-9f1e-2b6c5d4a3f10" // Burstable
	uidG       = "0b9a6c1e-7d44-4f0e-a2d5-6e8f9c0d1b23" // Guaranteed
	uidE       = "5f2d8e4a-9b17-4c6d-8e3f-1a2b3c4d5e6f" // BestEffort
)

func TestFixtureContainersResolveToTheirCounters(t *testing.T) {
	const mi = 1 << 20
	tests := []struct {
		fixture     string
		layout      Layout
		pod         PodCgroup
		containerID string
		cpu         CPUStat
		oomKills    uint64
		usage       Usage
	}{
		{
			fixture: "unified-systemd-containerd", layout: Layout{Driver: DriverSystemd},
			pod: PodCgroup{UID: uidB, QoS: QoSBurstable}, containerID: "containerd://" + fixtureApp,
			cpu: CPUStat{Periods: 4210, Throttled: 987, ThrottledTime: 45612345 * time.Microsecond, Usage: 5316541 * time.Microsecond}, oomKills: 2,
			usage: Usage{CPU: 5316541 * time.Microsecond, Memory: 256 * mi, WorkingSet: 216 * mi, Peak: 384 * mi, PeakAvailable: true},
		},
		{
			fixture: "unified-systemd-containerd", layout: Layout{Driver: DriverSystemd},
			pod: PodCgroup{UID: uidG, QoS: QoSGuaranteed}, containerID: "containerd://" + fixtureDB,
			cpu:   CPUStat{Periods: 9000, Throttled: 12, ThrottledTime: 3400 * time.Microsecond, Usage: 98765432 * time.Microsecond},
			usage: Usage{CPU: 98765432 * time.Microsecond, Memory: 1024 * mi, WorkingSet: 924 * mi, Peak: 1152 * mi, PeakAvailable: true},
		},
		{
			fixture: "unified-cgroupfs-crio", layout: Layout{Driver: DriverCgroupfs, Root: "/k8s"},
			pod: PodCgroup{UID: uidE, QoS: QoSBestEffort}, containerID: "cri-o://" + fixtureJob,
			cpu: CPUStat{Periods: 120, Usage: 120 * time.Millisecond}, oomKills: 4,
			// This node's kernel (5.15) has no memory.peak.
			usage: Usage{CPU: 120 * time.Millisecond, Memory: 8 * mi, WorkingSet: 7 * mi},
		},
		{
			fixture: "unified-cgroupfs-crio", layout: Layout{Driver: DriverCgroupfs, Root: "/k8s"},
			pod: PodCgroup{UID: uidB, QoS: QoSBurstable}, containerID: "cri-o://" + fixtureApp,
			cpu:   CPUStat{Periods: 300, Throttled: 299, ThrottledTime: 12 * time.Second, Usage: 30 * time.Second},
			usage: Usage{CPU: 30 * time.Second, Memory: 512 * mi, WorkingSet: 512 * mi},
		},
		{
			fixture: "legacy-systemd-docker", layout: Layout{Driver: DriverSystemd},
			pod: PodCgroup{UID: uidB, QoS: QoSBurstable}, containerID: "docker://" + fixtureApp,
			cpu: CPUStat{Periods: 1500, Throttled: 750, ThrottledTime: 2500 * time.Millisecond}, oomKills: 1,
			usage: Usage{CPU: 31415926535, Memory: 200 * mi, WorkingSet: 180 * mi, Peak: 300 * mi, PeakAvailable: true},
		},
		{
			fixture: "legacy-systemd-docker", layout: Layout{Driver: DriverSystemd},
			pod: PodCgroup{UID: uidE, QoS: QoSBestEffort}, containerID: "docker://" + fixtureJob,
			cpu:   CPUStat{Periods: 10},
			usage: Usage{CPU: time.Millisecond, Memory: 4 * mi, Peak: 4 * mi, PeakAvailable: true},
		},
		{
			fixture: "legacy-cgroupfs-containerd", layout: Layout{Driver: DriverCgroupfs},
			pod: PodCgroup{UID: uidG, QoS: QoSGuaranteed}, containerID: "containerd://" + fixtureDB,
			cpu:   CPUStat{Periods: 77, Throttled: 7, ThrottledTime: 700 * time.Microsecond},
			usage: Usage{CPU: 77 * time.Second, Memory: 2048 * mi, WorkingSet: 1536 * mi, Peak: 3072 * mi, PeakAvailable: true},
		},
		{
			fixture: "legacy-cgroupfs-containerd", layout: Layout{Driver: DriverCgroupfs},
			pod: PodCgroup{UID: uidB, QoS: QoSBurstable}, containerID: "containerd://" + fixtureApp,
			cpu: CPUStat{Periods: 600, Throttled: 300, ThrottledTime: 1000}, oomKills: 6,
			usage: Usage{CPU: 600 * time.Millisecond, Memory: 100 * mi, WorkingSet: 90 * mi, Peak: 150 * mi, PeakAvailable: true},
		},
		{
			fixture: "hybrid-systemd-crio", layout: Layout{Driver: DriverSystemd},
			pod: PodCgroup{UID: uidG, QoS: QoSGuaranteed}, containerID: "cri-o://" + fixtureDB,
			cpu: CPUStat{Periods: 31, Throttled: 3, ThrottledTime: 42 * time.Microsecond}, oomKills: 2,
			// total_inactive_file (50 MiB) was read after usage fell to 48
			// MiB: the working set clamps at zero.
			usage: Usage{CPU: 4200 * time.Millisecond, Memory: 48 * mi, Peak: 64 * mi, PeakAvailable: true},
		},
	}
	for _, tt := range tests {
		t.Run(tt.fixture+"/"+tt.containerID[:strings.Index(tt.containerID, "://")+7], func(t *testing.T) {
			h, _ := detectFixture(t, tt.fixture)
			cg, err := tt.layout.ContainerDir(tt.pod, tt.containerID)
			require.NoError(t, err)

			cpu, err := h.OpenCPUStat(cg)
			require.NoError(t, err)
			defer cpu.Close()
			var s CPUStat
			require.NoError(t, cpu.Read(&s))
			assert.Equal(t, tt.cpu, s)

			oom, err := h.OpenOOMKills(cg)
			require.NoError(t, err)
			defer oom.Close()
			n, err := oom.OOMKills()
			require.NoError(t, err)
			assert.Equal(t, tt.oomKills, n)

			usage, err := h.OpenUsage(cg)
			require.NoError(t, err)
			defer usage.Close()
			var u Usage
			require.NoError(t, usage.Read(&u))
			assert.Equal(t, tt.usage, u)

			uid, id, ok := ParseContainerPath(cpu.Path())
			require.True(t, ok, cpu.Path())
			assert.Equal(t, tt.pod.UID, uid)
			assert.Equal(t, tt.containerID[strings.Index(tt.containerID, "://")+3:], id)
		})
	}
}

func TestOpenOOMKillsPicksFileByMemoryControllerVersion(t *testing.T) {
	h, _ := detectFixture(t, "unified-systemd-containerd")
	r, err := h.OpenOOMKills("/system.slice/containerd.service")
	require.NoError(t, err)
	defer r.Close()
	assert.IsType(t, &MemoryEventsReader{}, r)
	assert.Equal(t, "memory.events", filepath.Base(r.Path()))

	h, _ = detectFixture(t, "hybrid-systemd-crio")
	cg, err := Layout{Driver: DriverSystemd}.ContainerDir(PodCgroup{UID: uidG, QoS: QoSGuaranteed}, "cri-o://"+fixtureDB)
	require.NoError(t, err)
	r, err = h.OpenOOMKills(cg)
	require.NoError(t, err)
	defer r.Close()
	assert.IsType(t, &OOMControlReader{}, r)
	assert.Equal(t, "memory.oom_control", filepath.Base(r.Path()))

	m, ok := h.Controller("memory")
	require.True(t, ok)
	r, err = OpenOOMKillsAt(m, filepath.Dir(r.Path()))
	require.NoError(t, err)
	defer r.Close()
	n, err := r.OOMKills()
	require.NoError(t, err)
	assert.Equal(t, uint64(2), n)
}

func TestReadersReportAMissingCgroupAsGone(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "removed")
	_, err := OpenCPUStat(dir)
	assert.ErrorIs(t, err, ErrGone)
	assert.ErrorIs(t, err, os.ErrNotExist)
	_, err = OpenMemoryEvents(dir)
	assert.ErrorIs(t, err, ErrGone)
	_, err = OpenOOMControl(dir)
	assert.ErrorIs(t, err, ErrGone)

	h, _ := detectFixture(t, "legacy-cgroupfs-containerd")
	_, err = h.OpenOOMKills("/kubepods/pod" + uidE + "/" + fixtureJob)
	assert.ErrorIs(t, err, ErrGone)
	assert.Contains(t, err.Error(), "memory.oom_control")
}

func TestReaderSeesNewContentOnEachRead(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "cpu.stat")
	writeFile(t, p, "nr_periods 1\nnr_throttled 0\nthrottled_usec 0\n")
	r, err := OpenCPUStat(dir)
	require.NoError(t, err)
	defer r.Close()
	var s CPUStat
	require.NoError(t, r.Read(&s))
	assert.Equal(t, uint64(1), s.Periods)

	writeFile(t, p, "nr_periods 200\nnr_throttled 100\nthrottled_usec 7\n")
	require.NoError(t, r.Read(&s))
	assert.Equal(t, CPUStat{Periods: 200, Throttled: 100, ThrottledTime: 7 * time.Microsecond}, s)
}

func TestReaderGrowsItsBufferForLongFiles(t *testing.T) {
	dir := t.TempDir()
	var b strings.Builder
	for i := range 200 {
		fmt.Fprintf(&b, "future_key_%d %d\n", i, i)
	}
	b.WriteString("nr_periods 9\nnr_throttled 8\nthrottled_time 7\n")
	writeFile(t, filepath.Join(dir, "cpu.stat"), b.String())
	r, err := OpenCPUStat(dir)
	require.NoError(t, err)
	defer r.Close()
	var s CPUStat
	require.NoError(t, r.Read(&s))
	assert.Equal(t, CPUStat{Periods: 9, Throttled: 8, ThrottledTime: 7}, s)
	assert.Zero(t, testing.AllocsPerRun(20, func() { _ = r.Read(&s) }), "the grown buffer is kept")
}

func TestReaderRejectsOversizedFile(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "cpu.stat"), strings.Repeat("k 1\n", maxFileSize/4+1))
	r, err := OpenCPUStat(dir)
	require.NoError(t, err)
	defer r.Close()
	err = r.Read(new(CPUStat))
	require.Error(t, err)
	assert.ErrorIs(t, err, ErrMalformed)
	assert.Contains(t, err.Error(), r.Path())
}

func TestReaderErrorsNameTheFile(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "cpu.stat"), "nr_periods x\n")
	writeFile(t, filepath.Join(dir, "memory.events"), "oom 1\n")
	writeFile(t, filepath.Join(dir, "memory.oom_control"), "under_oom 0\noom_kill 1")

	c, err := OpenCPUStat(dir)
	require.NoError(t, err)
	defer c.Close()
	err = c.Read(new(CPUStat))
	assert.ErrorIs(t, err, ErrMalformed)
	assert.Contains(t, err.Error(), filepath.Join(dir, "cpu.stat"))

	m, err := OpenMemoryEvents(dir)
	require.NoError(t, err)
	defer m.Close()
	_, err = m.OOMKills()
	assert.ErrorIs(t, err, ErrMalformed)
	assert.Contains(t, err.Error(), filepath.Join(dir, "memory.events"))

	o, err := OpenOOMControl(dir)
	require.NoError(t, err)
	defer o.Close()
	_, err = o.OOMKills()
	assert.ErrorIs(t, err, ErrMalformed)
	assert.Contains(t, err.Error(), filepath.Join(dir, "memory.oom_control"))
}

func TestReaderFailsAfterClose(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "cpu.stat"), cpuStatV1)
	r, err := OpenCPUStat(dir)
	require.NoError(t, err)
	require.NoError(t, r.Close())
	assert.ErrorIs(t, r.Read(new(CPUStat)), os.ErrClosed)
	assert.ErrorIs(t, r.Close(), os.ErrClosed)
}

func TestReadersDoNotAllocate(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "cpu.stat"), cpuStatV2)
	writeFile(t, filepath.Join(dir, "memory.events"), memoryEvents)
	writeFile(t, filepath.Join(dir, "memory.oom_control"), oomControlV1)
	c, err := OpenCPUStat(dir)
	require.NoError(t, err)
	defer c.Close()
	m, err := OpenMemoryEvents(dir)
	require.NoError(t, err)
	defer m.Close()
	o, err := OpenOOMControl(dir)
	require.NoError(t, err)
	defer o.Close()
	var kill OOMKillReader = m

	var s CPUStat
	allocs := testing.AllocsPerRun(100, func() {
		if err := c.Read(&s); err != nil {
			panic(err)
		}
		if _, err := kill.OOMKills(); err != nil {
			panic(err)
		}
		if _, err := o.OOMKills(); err != nil {
			panic(err)
		}
	})
	assert.Zero(t, allocs)
}
