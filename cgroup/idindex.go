package cgroup

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"syscall"
)

// CgroupID returns the id of the cgroup at directory dir: the directory's
// inode number, which on 64-bit kernels is the kernfs node id that
// bpf_get_current_cgroup_id and the OOM tracepoint report.
func CgroupID(dir string) (uint64, error) {
	fi, err := os.Stat(dir)
	if err != nil {
		return 0, gone(err)
	}
	return inode(fi)
}

func inode(fi fs.FileInfo) (uint64, error) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, fmt.Errorf("stat %s: no inode number", fi.Name())
	}
	return st.Ino, nil
}

// IDIndex maps cgroup ids to the directories of a subtree, e.g. the
// kubepods cgroup of the memory controller. Cgroup ids are unique only
// within one hierarchy, so one index covers one hierarchy. It is safe for
// concurrent use.
type IDIndex struct {
	dir string

	scan  sync.Mutex // held while walking the tree
	mu    sync.RWMutex
	paths map[uint64]string
}

// NewIDIndex walks dir and indexes it and every cgroup below it.
func NewIDIndex(dir string) (*IDIndex, error) {
	x := &IDIndex{dir: dir}
	if err := x.Refresh(); err != nil {
		return nil, err
	}
	return x, nil
}

// Lookup returns the directory of the cgroup with the given id. On a miss
// it walks the tree again, so a cgroup created since the last walk is found;
// a failed walk counts as a miss (Refresh returns its error).
func (x *IDIndex) Lookup(id uint64) (path string, ok bool) {
	if p, ok := x.get(id); ok {
		return p, true
	}
	x.scan.Lock()
	defer x.scan.Unlock()
	// Another caller may have walked the tree while this one waited.
	if p, ok := x.get(id); ok {
		return p, true
	}
	if err := x.refreshLocked(); err != nil {
		return "", false
	}
	return x.get(id)
}

// Refresh walks the tree again, dropping cgroups that are gone.
func (x *IDIndex) Refresh() error {
	x.scan.Lock()
	defer x.scan.Unlock()
	return x.refreshLocked()
}

// Len returns the number of cgroups indexed.
func (x *IDIndex) Len() int {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return len(x.paths)
}

func (x *IDIndex) get(id uint64) (string, bool) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	p, ok := x.paths[id]
	return p, ok
}

func (x *IDIndex) refreshLocked() error {
	x.mu.RLock()
	paths := make(map[uint64]string, len(x.paths))
	x.mu.RUnlock()
	// A trailing slash makes the walk follow dir if it is a symbolic link,
	// such as /sys/fs/cgroup/cpu -> cpu,cpuacct on v1.
	dir := filepath.Clean(x.dir)
	root := dir
	if root != "/" {
		root += "/"
	}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if p == root {
			p = dir
		}
		if err != nil {
			// A cgroup removed during the walk is not an error, but the
			// indexed directory itself must exist.
			if p != dir && errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if !d.IsDir() {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return fs.SkipDir
			}
			return err
		}
		ino, err := inode(fi)
		if err != nil {
			return err
		}
		paths[ino] = p
		return nil
	})
	if err != nil {
		return fmt.Errorf("index cgroup ids under %s: %w", x.dir, gone(err))
	}
	x.mu.Lock()
	x.paths = paths
	x.mu.Unlock()
	return nil
}
