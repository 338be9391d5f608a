// Package bpf is Kerf's kernel side: CO-RE BPF programs, their committed
// bpf2go output and the Go loaders that attach them and read their events.
//
// OOMTracer reports every OOM-killer victim (docs/design.md section 5, OOM source 1)
// with the victim's pid, comm and cgroup ids, stamped with the kernel's
// CLOCK_MONOTONIC time. Mapping cgroup ids to pods and containers is left to
// the cgroup and node packages.
package bpf
