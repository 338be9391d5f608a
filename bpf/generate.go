package bpf

// The BPF object is compiled by bpf2go with pinned tools and flags, so that
// regenerating it on the project's build image is byte-for-byte reproducible
// (make generate; make test fails when the committed output drifts).
// include/ holds vmlinux.h and the libbpf headers the C file uses, committed
// so that the output depends on neither the build host's kernel nor its
// libbpf version. vmlinux.h is refreshed by hand, on a kernel with BTF:
//
//	bpftool btf dump file /sys/kernel/btf/vmlinux format c > include/vmlinux.h

//go:generate go tool bpf2go -cc clang-14 -strip llvm-strip-14 -cflags "-O2 -g -Wall -Werror -Iinclude" -target bpfel -type oom_event -type oom_event_flag oom oom.c
