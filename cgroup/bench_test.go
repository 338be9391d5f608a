package cgroup

import (
	"os"
	"path/filepath"
	"testing"
)

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
