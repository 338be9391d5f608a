//go:build ignore

// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
//
// OOM-kill tracer: one event per oom/mark_victim, sent to user space through
// a BPF ring buffer (DESIGN.md section 5, "OOM kills", source 1).
//
// Two programs, loaded one at a time by the Go loader (oom_linux.go):
//
//   - oom_mark_victim_btf, SEC("tp_btf/mark_victim"): the primary hook. Since
//     Linux 6.9 the tracepoint passes the victim task, so every field is read
//     from the victim itself, whichever task runs the OOM killer.
//   - oom_mark_victim_tp, SEC("tracepoint/oom/mark_victim"): the fallback for
//     kernels that refuse BTF tracing programs. Its record carries only the
//     victim's pid (and, since 6.9, its comm), not a task pointer.
//
// Where the victim task is not available (the classic tracepoint, or tp_btf on
// kernels before 6.9 whose prototype is mark_victim(int pid)), the program
// takes the victim's tgid and cgroup ids from the current task when the
// current task is the victim or belongs to its thread group: the memcg OOM
// killer runs in the allocating task, which in a one-process container is the
// victim. Otherwise it leaves them zero and sets OOM_EVENT_TASK_UNRESOLVED, and
// the loader resolves them from /proc/<pid> before the process is reaped. A
// lookup by pid inside BPF (bpf_task_from_pid) is a kfunc that tracepoint
// programs may not call, so it is not an option for the fallback.
//
// Cgroup ids are kernfs node ids, which equal the inode number of the cgroup
// directory on 64-bit kernels: cgroup_id is the victim's cgroup in the default
// (v2) hierarchy, memcg_id the cgroup of its memory controller state. On a
// v1 system memcg_id is the v1 memory cgroup; on a v2 system it is the
// nearest ancestor of cgroup_id that has the memory controller enabled
// (cgroup_id itself for Kubernetes containers).

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>

char LICENSE[] SEC("license") = "Dual BSD/GPL";

#define TASK_COMM_LEN 16

// Flags of an oom_event.
enum oom_event_flag {
	// The victim task could not be read in BPF: tgid, cgroup_id and
	// memcg_id are zero (and comm too where the tracepoint lacks it).
	OOM_EVENT_TASK_UNRESOLVED = 1 << 0,
};

// One OOM victim, as written to the ring buffer.
struct oom_event {
	// bpf_ktime_get_ns() at the hook: CLOCK_MONOTONIC nanoseconds.
	__u64 ktime_ns;
	// Victim's cgroup id in the default (v2) hierarchy.
	__u64 cgroup_id;
	// Id of the cgroup that holds the victim's memory controller state.
	__u64 memcg_id;
	// Victim's task id, as the tracepoint reports it.
	__u32 pid;
	// Victim's thread-group (process) id.
	__u32 tgid;
	// Thread-group id of the task that ran the OOM killer.
	__u32 trigger_tgid;
	// OOM_EVENT_* flags.
	enum oom_event_flag flags;
	// Victim's command name, NUL-terminated.
	__u8 comm[TASK_COMM_LEN];
};

// Pre-5.5 kernels keep the kernfs id in a union whose low half is the inode.
union kernfs_node_id {
	struct {
		__u32 ino;
		__u32 generation;
	};
	__u64 id;
};

struct kernfs_node___old {
	union kernfs_node_id id;
} __attribute__((preserve_access_index));

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 64 * 1024);
	__type(value, struct oom_event);
} events SEC(".maps");

// Events lost because the ring buffer was full.
volatile __u64 dropped = 0;

static __always_inline __u64 kernfs_id(struct kernfs_node *kn)
{
	if (!kn)
		return 0;
	if (bpf_core_type_exists(union kernfs_node_id)) {
		struct kernfs_node___old *old = (void *)kn;
		return BPF_CORE_READ(old, id.ino);
	}
	return BPF_CORE_READ(kn, id);
}

// fill_task copies the victim's tgid, comm and cgroup ids from task.
static __always_inline void fill_task(struct oom_event *e, struct task_struct *task, bool comm)
{
	struct css_set *cgroups;

	e->tgid = BPF_CORE_READ(task, tgid);
	if (comm)
		BPF_CORE_READ_STR_INTO(&e->comm, task, comm);

	cgroups = BPF_CORE_READ(task, cgroups);
	if (!cgroups)
		return;
	e->cgroup_id = kernfs_id(BPF_CORE_READ(cgroups, dfl_cgrp, kn));

	if (bpf_core_enum_value_exists(enum cgroup_subsys_id, memory_cgrp_id)) {
		int id = bpf_core_enum_value(enum cgroup_subsys_id, memory_cgrp_id);
		struct cgroup_subsys_state *css = NULL;

		bpf_core_read(&css, sizeof(css), &cgroups->subsys[id]);
		if (css)
			e->memcg_id = kernfs_id(BPF_CORE_READ(css, cgroup, kn));
	}
}

// fill_from_current fills e from the current task when it is the victim or
// shares its thread group, and flags e as unresolved otherwise.
static __always_inline void fill_from_current(struct oom_event *e)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u32 cur_pid = (__u32)pid_tgid;
	__u32 cur_tgid = pid_tgid >> 32;

	if (cur_pid != e->pid && cur_tgid != e->pid) {
		e->flags |= OOM_EVENT_TASK_UNRESOLVED;
		return;
	}
	// A sibling thread's comm may differ from the victim's: take it only
	// from the victim thread itself.
	fill_task(e, (struct task_struct *)bpf_get_current_task(), !e->comm[0] && cur_pid == e->pid);
}

static __always_inline struct oom_event *reserve(void)
{
	struct oom_event *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);

	if (!e) {
		__sync_fetch_and_add(&dropped, 1);
		return NULL;
	}
	__builtin_memset(e, 0, sizeof(*e));
	e->ktime_ns = bpf_ktime_get_ns();
	e->trigger_tgid = bpf_get_current_pid_tgid() >> 32;
	return e;
}

SEC("tp_btf/mark_victim")
int oom_mark_victim_btf(unsigned long long *ctx)
{
	struct oom_event *e = reserve();

	if (!e)
		return 0;
	// Linux 6.9 changed mark_victim(int pid) into
	// mark_victim(struct task_struct *task, uid_t uid) in the same commit
	// that added comm to the tracepoint record.
	if (bpf_core_field_exists(struct trace_event_raw_mark_victim, __data_loc_comm)) {
		struct task_struct *task = (struct task_struct *)ctx[0];

		e->pid = BPF_CORE_READ(task, pid);
		fill_task(e, task, true);
	} else {
		e->pid = (__u32)ctx[0];
		fill_from_current(e);
	}
	bpf_ringbuf_submit(e, 0);
	return 0;
}

SEC("tracepoint/oom/mark_victim")
int oom_mark_victim_tp(struct trace_event_raw_mark_victim *ctx)
{
	struct oom_event *e = reserve();

	if (!e)
		return 0;
	e->pid = ctx->pid;
	if (bpf_core_field_exists(ctx->__data_loc_comm)) {
		__u32 loc = ctx->__data_loc_comm;

		bpf_probe_read_kernel_str(e->comm, sizeof(e->comm), (void *)ctx + (loc & 0xffff));
	}
	fill_from_current(e);
	bpf_ringbuf_submit(e, 0);
	return 0;
}
