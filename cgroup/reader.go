package cgroup

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"

	"golang.org/x/sys/unix"
)

// ErrGone is matched (errors.Is) by errors from opening or reading a file of
// a cgroup that no longer exists: its directory was removed (ENOENT), or it
// was removed while the file was open (ENODEV).
var ErrGone = errors.New("cgroup is gone")

// maxFileSize caps a reader's buffer; the flat-keyed files read here are a
// few hundred bytes.
const maxFileSize = 64 << 10

// file is an open cgroup file that is re-read from offset 0 with one pread
// into a buffer it owns. The kernel regenerates a cgroup file's content on
// every read at offset 0, so no seek or reopen is needed.
//
// It holds the bare descriptor, not an *os.File: a node's thousands of
// open cgroup files then cost no os.File, cleanup record or poller state
// each (about 200 bytes of the agent's heap per file).
type file struct {
	fd   int
	path string
	buf  []byte
	// shared, when set, is the buffer read into instead of buf: one
	// buffer for many files read one at a time.
	shared *[]byte
}

// sharedFileSize is the first size of a shared buffer: it fits a
// memory.stat, the largest file read through one.
const sharedFileSize = 4096

func openFile(dir, name string) (file, error) { return openFileSize(dir, name, 512) }

// openFileSize opens a file whose content is usually under size bytes, so
// its first read does not grow the buffer.
func openFileSize(dir, name string, size int) (file, error) {
	path := filepath.Join(dir, name)
	var fd int
	var err error
	for {
		fd, err = unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		return file{}, gone(&os.PathError{Op: "open", Path: path, Err: err})
	}
	return file{fd: fd, path: path, buf: make([]byte, size)}, nil
}

// read returns the file's current content, valid until the next read.
func (r *file) read() ([]byte, error) {
	if r.fd < 0 {
		return nil, fmt.Errorf("read %s: %w", r.path, os.ErrClosed)
	}
	if r.shared != nil {
		if len(*r.shared) == 0 {
			*r.shared = make([]byte, sharedFileSize)
		}
		r.buf = *r.shared
		defer func() { *r.shared, r.buf = r.buf, nil }() // it may have grown
	}
	for {
		n, err := unix.Pread(r.fd, r.buf, 0)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", r.path, gone(err))
		}
		if n < len(r.buf) {
			return r.buf[:n], nil
		}
		// The content may not have fit: grow and read again. This happens
		// at most a few times per reader.
		if len(r.buf) >= maxFileSize {
			return nil, fmt.Errorf("read %s: %w", r.path, malformed("larger than %d bytes", maxFileSize))
		}
		r.buf = make([]byte, 2*len(r.buf))
	}
}

func (r *file) close() error {
	if r.fd < 0 {
		return fmt.Errorf("close %s: %w", r.path, os.ErrClosed)
	}
	fd := r.fd
	r.fd = -1
	if err := unix.Close(fd); err != nil {
		return &os.PathError{Op: "close", Path: r.path, Err: err}
	}
	return nil
}

// gone marks err with ErrGone when it says the cgroup was removed.
func gone(err error) error {
	if errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ENODEV) {
		return fmt.Errorf("%w: %w", ErrGone, err)
	}
	return err
}

// CPUStatReader reads a cgroup's cpu.stat. It is not safe for concurrent use.
type CPUStatReader struct{ file file }

// OpenCPUStat opens cpu.stat in the cgroup directory dir.
func OpenCPUStat(dir string) (*CPUStatReader, error) {
	f, err := openFile(dir, "cpu.stat")
	if err != nil {
		return nil, err
	}
	return &CPUStatReader{file: f}, nil
}

// Read reads and parses the file into s; it does not allocate.
func (r *CPUStatReader) Read(s *CPUStat) error {
	data, err := r.file.read()
	if err != nil {
		return err
	}
	if err := ParseCPUStat(data, s); err != nil {
		return fmt.Errorf("parse %s: %w", r.file.path, err)
	}
	return nil
}

// Path returns the path of the file read.
func (r *CPUStatReader) Path() string { return r.file.path }

// Close closes the file.
func (r *CPUStatReader) Close() error { return r.file.close() }

// OOMKillReader reads a cgroup's OOM kill count from whichever file the
// node's cgroup version has; Hierarchy.OpenOOMKills picks one.
type OOMKillReader interface {
	// OOMKills returns the number of processes in the cgroup killed by
	// the OOM killer since the cgroup was created.
	OOMKills() (uint64, error)
	// Path returns the path of the file read.
	Path() string
	// Close closes the file.
	Close() error
}

// MemoryEventsReader reads cgroup v2's memory.events. It is not safe for
// concurrent use.
type MemoryEventsReader struct{ file file }

// OpenMemoryEvents opens memory.events in the cgroup directory dir.
func OpenMemoryEvents(dir string) (*MemoryEventsReader, error) {
	f, err := openFile(dir, "memory.events")
	if err != nil {
		return nil, err
	}
	return &MemoryEventsReader{file: f}, nil
}

// Read reads and parses the file into e; it does not allocate.
func (r *MemoryEventsReader) Read(e *MemoryEvents) error {
	data, err := r.file.read()
	if err != nil {
		return err
	}
	if err := ParseMemoryEvents(data, e); err != nil {
		return fmt.Errorf("parse %s: %w", r.file.path, err)
	}
	return nil
}

// OOMKills returns memory.events' oom_kill.
func (r *MemoryEventsReader) OOMKills() (uint64, error) {
	var e MemoryEvents
	err := r.Read(&e)
	return e.OOMKill, err
}

// Path returns the path of the file read.
func (r *MemoryEventsReader) Path() string { return r.file.path }

// Close closes the file.
func (r *MemoryEventsReader) Close() error { return r.file.close() }

// OOMControlReader reads cgroup v1's memory.oom_control. It is not safe for
// concurrent use.
type OOMControlReader struct{ file file }

// OpenOOMControl opens memory.oom_control in the cgroup directory dir.
func OpenOOMControl(dir string) (*OOMControlReader, error) {
	f, err := openFile(dir, "memory.oom_control")
	if err != nil {
		return nil, err
	}
	return &OOMControlReader{file: f}, nil
}

// Read reads and parses the file into c; it does not allocate.
func (r *OOMControlReader) Read(c *OOMControl) error {
	data, err := r.file.read()
	if err != nil {
		return err
	}
	if err := ParseOOMControl(data, c); err != nil {
		return fmt.Errorf("parse %s: %w", r.file.path, err)
	}
	return nil
}

// OOMKills returns memory.oom_control's oom_kill.
func (r *OOMControlReader) OOMKills() (uint64, error) {
	var c OOMControl
	err := r.Read(&c)
	return c.OOMKill, err
}

// Path returns the path of the file read.
func (r *OOMControlReader) Path() string { return r.file.path }

// Close closes the file.
func (r *OOMControlReader) Close() error { return r.file.close() }
