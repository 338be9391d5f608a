package cgroup

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/kerf-dev/kerf/test/kerneltest"
)

// BenchmarkReadCPUStat reads and parses one real cgroup's cpu.stat.
func BenchmarkReadCPUStat(b *testing.B) {
	_, m := v1Controller(b, "cpu")
	r, err := OpenCPUStat(kerneltest.MakeCgroup(b, m.Path))
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	var s CPUStat
	b.ReportAllocs()
	for b.Loop() {
		if err := r.Read(&s); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkReadCPUStat500 is one sampling pass over 500 real cgroups, the
// figure DESIGN.md section 10 sets at under 1 ms.
func BenchmarkReadCPUStat500(b *testing.B) {
	const n = 500
	_, m := v1Controller(b, "cpu")
	parent := kerneltest.MakeCgroup(b, m.Path)
	readers := make([]*CPUStatReader, n)
	for i := range readers {
		dir := filepath.Join(parent, fmt.Sprintf("c%03d", i))
		if err := os.Mkdir(dir, 0o755); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { kerneltest.RemoveCgroup(b, dir) })
		r, err := OpenCPUStat(dir)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { r.Close() })
		readers[i] = r
	}
	var s CPUStat
	b.ReportAllocs()
	for b.Loop() {
		for _, r := range readers {
			if err := r.Read(&s); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/read")
}

// BenchmarkReadCPUStatFile reads cpu.stat from a regular file; it needs no
// root and measures the reader apart from the kernel's cgroup code.
func BenchmarkReadCPUStatFile(b *testing.B) {
	dir := b.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "cpu.stat"), []byte(cpuStatV2), 0o644); err != nil {
		b.Fatal(err)
	}
	r, err := OpenCPUStat(dir)
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	var s CPUStat
	b.ReportAllocs()
	for b.Loop() {
		if err := r.Read(&s); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkParseCPUStat(b *testing.B) {
	for _, bm := range []struct{ name, data string }{{"v1", cpuStatV1}, {"v2", cpuStatV2}} {
		b.Run(bm.name, func(b *testing.B) {
			data := []byte(bm.data)
			var s CPUStat
			b.ReportAllocs()
			b.SetBytes(int64(len(data)))
			for b.Loop() {
				if err := ParseCPUStat(data, &s); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkParseMemoryEvents(b *testing.B) {
	data := []byte(memoryEvents)
	var e MemoryEvents
	b.ReportAllocs()
	for b.Loop() {
		if err := ParseMemoryEvents(data, &e); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkParseOOMControl(b *testing.B) {
	data := []byte(oomControlV1)
	var c OOMControl
	b.ReportAllocs()
	for b.Loop() {
		if err := ParseOOMControl(data, &c); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkParseContainerPath(b *testing.B) {
	p := "/sys/fs/cgroup/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + testUID_ + ".slice/cri-containerd-" + testID + ".scope"
	b.ReportAllocs()
	for b.Loop() {
		if _, _, ok := ParseContainerPath(p); !ok {
			b.Fatal("no match")
		}
	}
}
