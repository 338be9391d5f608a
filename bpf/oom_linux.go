//go:build linux && (386 || amd64 || arm || arm64 || loong64 || mips64le || mipsle || ppc64le || riscv64)

package bpf

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/ringbuf"
	"github.com/cilium/ebpf/rlimit"
	"golang.org/x/sys/unix"
)

// OOMTracer reports OOM-killer victims from a BPF program attached to the
// oom/mark_victim tracepoint. ReadEvent must be called from one goroutine at
// a time; Close may be called from any goroutine.
type OOMTracer struct {
	hook     Hook
	coll     *ebpf.Collection
	link     link.Link
	reader   *ringbuf.Reader
	dropped  *ebpf.Variable
	resolver procResolver

	rec ringbuf.Record
	raw oomOomEvent

	closeOnce sync.Once
	closeErr  error
}

// NewOOMTracer loads the OOM tracer and attaches it. Unless opts.Hook forces
// one, it tries HookBTF and then HookTracepoint, loading each program on its
// own so that a kernel refusing one still gets the other; if both fail the
// error names both causes. Missing privileges give an error wrapping
// ErrPermission.
func NewOOMTracer(opts OOMTracerOptions) (*OOMTracer, error) {
	return newOOMTracer(opts, attach)
}

// newOOMTracer is NewOOMTracer with the per-hook loader as a parameter, so
// tests can make a hook fail.
func newOOMTracer(opts OOMTracerOptions, attach func(Hook, OOMTracerOptions) (*OOMTracer, error)) (*OOMTracer, error) {
	hooks := Hooks()
	if opts.Hook != "" {
		if _, err := programFor(opts.Hook); err != nil {
			return nil, err
		}
		hooks = []Hook{opts.Hook}
	}

	// Kernels from 5.11 account BPF memory to the memory cgroup and ignore
	// RLIMIT_MEMLOCK; older ones need it lifted, which needs CAP_SYS_RESOURCE.
	// Failing here is not fatal: loading then reports what is missing.
	_ = rlimit.RemoveMemlock()

	var errs []error
	for _, hook := range hooks {
		t, err := attach(hook, opts)
		if err == nil {
			return t, nil
		}
		errs = append(errs, fmt.Errorf("%s: %w", hook, err))
	}
	err := errs[0]
	if len(errs) == 2 {
		err = fmt.Errorf("%w; %w", errs[0], errs[1])
	}
	if missing := missingCapabilities(); len(missing) > 0 {
		return nil, fmt.Errorf("start OOM tracer: %w (missing %s): %w", ErrPermission, strings.Join(missing, ", "), err)
	}
	if errors.Is(err, unix.EPERM) {
		return nil, fmt.Errorf("start OOM tracer: %w (or RLIMIT_MEMLOCK is too low on a kernel before 5.11): %w", ErrPermission, err)
	}
	return nil, fmt.Errorf("start OOM tracer: %w", err)
}

// programFor returns the BPF program that implements hook.
func programFor(hook Hook) (string, error) {
	switch hook {
	case HookBTF:
		return oomProgOomMarkVictimBtf, nil
	case HookTracepoint:
		return oomProgOomMarkVictimTp, nil
	}
	return "", fmt.Errorf("OOM tracer hook %q: must be %q or %q", hook, HookBTF, HookTracepoint)
}

// attach loads the program for hook, with the maps it uses, and attaches it.
func attach(hook Hook, opts OOMTracerOptions) (_ *OOMTracer, err error) {
	name, err := programFor(hook)
	if err != nil {
		return nil, err
	}
	spec, err := loadOom()
	if err != nil {
		return nil, fmt.Errorf("parse BPF object: %w", err)
	}
	for other := range spec.Programs {
		if other != name {
			delete(spec.Programs, other)
		}
	}

	t := &OOMTracer{hook: hook, resolver: newProcResolver(opts.ProcRoot)}
	defer func() {
		if err != nil {
			_ = t.Close()
		}
	}()

	t.coll, err = ebpf.NewCollectionWithOptions(spec, ebpf.CollectionOptions{
		Programs: ebpf.ProgramOptions{KernelTypes: opts.KernelTypes},
	})
	if err != nil {
		return nil, fmt.Errorf("load: %w", err)
	}
	prog := t.coll.Programs[name]
	t.dropped = t.coll.Variables[oomVarDropped]

	switch hook {
	case HookBTF:
		t.link, err = link.AttachTracing(link.TracingOptions{Program: prog, AttachType: ebpf.AttachTraceRawTp})
	case HookTracepoint:
		// Finds the tracepoint's id in tracefs; without tracefs mounted
		// the error says so.
		t.link, err = link.Tracepoint("oom", "mark_victim", prog, nil)
	}
	if err != nil {
		return nil, fmt.Errorf("attach: %w", err)
	}

	t.reader, err = ringbuf.NewReader(t.coll.Maps[oomMapEvents])
	if err != nil {
		return nil, fmt.Errorf("open ring buffer: %w", err)
	}
	return t, nil
}

// Hook returns the hook the tracer is attached to.
func (t *OOMTracer) Hook() Hook {
	return t.hook
}

// ReadEvent blocks until the next OOM kill and stores it in ev. It returns
// an error wrapping os.ErrClosed once Close is called, and one wrapping
// os.ErrDeadlineExceeded when the deadline set by SetDeadline passes.
func (t *OOMTracer) ReadEvent(ev *OOMEvent) error {
	if err := t.reader.ReadInto(&t.rec); err != nil {
		return fmt.Errorf("read OOM event: %w", err)
	}
	if _, err := binary.Decode(t.rec.RawSample, binary.NativeEndian, &t.raw); err != nil {
		return fmt.Errorf("decode OOM event (%d bytes): %w", len(t.rec.RawSample), err)
	}
	r := &t.raw
	comm := r.Comm[:]
	if i := bytes.IndexByte(comm, 0); i >= 0 {
		comm = comm[:i]
	}
	*ev = OOMEvent{
		KtimeNS:     r.KtimeNs,
		PID:         r.Pid,
		TGID:        r.Tgid,
		TriggerTGID: r.TriggerTgid,
		Comm:        string(comm),
		CgroupID:    r.CgroupId,
		MemcgID:     r.MemcgId,
		Resolution:  ResolvedInKernel,
	}
	if r.Flags&oomOomEventFlagOOM_EVENT_TASK_UNRESOLVED != 0 {
		ev.Resolution = ResolvedFromProc
		if err := t.resolver.resolve(ev); err != nil {
			ev.Resolution = Unresolved
		}
	}
	return nil
}

// SetDeadline makes ReadEvent return os.ErrDeadlineExceeded once deadline
// passes with no event to read; the zero time means no deadline. Call it
// between ReadEvent calls: it waits for a blocked ReadEvent to return.
func (t *OOMTracer) SetDeadline(deadline time.Time) {
	t.reader.SetDeadline(deadline)
}

// Dropped returns how many events the kernel could not deliver because the
// ring buffer was full.
func (t *OOMTracer) Dropped() (uint64, error) {
	var n uint64
	if err := t.dropped.Get(&n); err != nil {
		return 0, fmt.Errorf("read OOM tracer drop count: %w", err)
	}
	return n, nil
}

// Close detaches the program and frees its resources, interrupting a
// blocked ReadEvent. Calls after the first return the first call's result.
func (t *OOMTracer) Close() error {
	t.closeOnce.Do(func() { t.closeErr = t.close() })
	return t.closeErr
}

func (t *OOMTracer) close() error {
	var errs []error
	if t.reader != nil {
		if err := t.reader.Close(); err != nil {
			errs = append(errs, fmt.Errorf("close ring buffer reader: %w", err))
		}
	}
	if t.link != nil {
		if err := t.link.Close(); err != nil {
			errs = append(errs, fmt.Errorf("detach %s: %w", t.hook, err))
		}
	}
	if t.coll != nil {
		t.coll.Close()
	}
	return errors.Join(errs...)
}

// missingCapabilities names the capabilities the process lacks to load and
// attach tracing programs: CAP_BPF and CAP_PERFMON, each of which
// CAP_SYS_ADMIN also grants.
func missingCapabilities() []string {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return nil
	}
	has := func(c int) bool { return data[c/32].Effective&(1<<(c%32)) != 0 }
	if has(unix.CAP_SYS_ADMIN) {
		return nil
	}
	var missing []string
	if !has(unix.CAP_BPF) {
		missing = append(missing, "CAP_BPF")
	}
	if !has(unix.CAP_PERFMON) {
		missing = append(missing, "CAP_PERFMON")
	}
	return missing
}
