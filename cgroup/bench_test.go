package cgroup

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// BenchReads is the loop of the reader benchmarks: every iteration of b
// reads each of readers once, failing b on the first error, and with more
// than one reader it reports the time per read (ns/read). It is exported
// for the kernel benchmarks of package cgroup_test.
func BenchReads[T any, R interface{ Read(*T) error }](b *testing.B, readers ...R) {
	b.Helper()
	var v T
	b.ReportAllocs()
	for b.Loop() {
		for _, r := range readers {
			if err := r.Read(&v); err != nil {
				b.Fatal(err)
			}
		}
	}
	if len(readers) > 1 {
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(readers)), "ns/read")
	}
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
	BenchReads(b, r)
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

// BenchmarkReadUsageFiles500 is a usage pass over 500 fixture cgroups of
// regular files in each version's format; it needs no root and measures
// the readers and parsers apart from the kernel's cgroup code.
func BenchmarkReadUsageFiles500(b *testing.B) {
	const n = 500
	for _, version := range []int{1, 2} {
		b.Run(fmt.Sprintf("v%d", version), func(b *testing.B) {
			root := b.TempDir()
			m := Mount{Version: version}
			readers := make([]*UsageReader, n)
			for i := range readers {
				dir := filepath.Join(root, fmt.Sprintf("c%03d", i))
				if err := os.Mkdir(dir, 0o755); err != nil {
					b.Fatal(err)
				}
				writeUsageFiles(b, dir, version, true)
				r, err := OpenUsageAt(m, dir, m, dir)
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { r.Close() })
				readers[i] = r
			}
			BenchReads(b, readers...)
		})
	}
}

func BenchmarkParseUsage(b *testing.B) {
	var d time.Duration
	var s MemoryStat
	for _, bm := range []struct {
		name, data string
		parse      func([]byte) error
	}{
		{"cpuacct.usage", "31415926535\n", func(data []byte) error { return ParseCPUAcctUsage(data, &d) }},
		{"cpu.stat usage_usec", cpuStatV2, func(data []byte) error { return ParseCPUStatUsage(data, &d) }},
		{"memory.stat v1", memoryStatV1, func(data []byte) error { return ParseMemoryStatV1(data, &s) }},
		{"memory.stat v2", memoryStatV2, func(data []byte) error { return ParseMemoryStatV2(data, &s) }},
	} {
		b.Run(bm.name, func(b *testing.B) {
			data := []byte(bm.data)
			b.ReportAllocs()
			b.SetBytes(int64(len(data)))
			for b.Loop() {
				if err := bm.parse(data); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
