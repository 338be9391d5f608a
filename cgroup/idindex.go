package cgroup

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"time"
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
//
// A cgroup a walk no longer finds is still named for IDRetention (at most
// MaxGoneIDs of them, the oldest dropped first). An OOM kill is read after
// it happened, and by then its container may have restarted, its cgroup
// removed: on a starved node the agent read a kill's event after that, and
// the kill named no container.
type IDIndex struct {
	dir string
	now func() time.Time // nil: time.Now

	scan  sync.Mutex // held while walking the tree
	mu    sync.RWMutex
	paths map[uint64]string
	gone  map[uint64]goneCgroup
}

// goneCgroup is a cgroup a walk found removed, and when.
type goneCgroup struct {
	path string
	at   time.Time
}

const (
	// IDRetention is how long an IDIndex names a removed cgroup: well
	// over how late a starved agent reads an OOM kill.
	IDRetention = 10 * time.Minute
	// MaxGoneIDs bounds the removed cgroups an IDIndex keeps: a node's
	// containers that stopped within IDRetention, about 100 bytes each.
	MaxGoneIDs = 1024
)

// NewIDIndex walks dir and indexes it and every cgroup below it.
func NewIDIndex(dir string) (*IDIndex, error) {
	x := &IDIndex{dir: dir, now: time.Now}
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

// Refresh walks the tree again. A cgroup gone since the last walk is kept
// as removed (see IDIndex).
func (x *IDIndex) Refresh() error {
	x.scan.Lock()
	defer x.scan.Unlock()
	return x.refreshLocked()
}

// Len returns the number of cgroups indexed that the last walk found.
func (x *IDIndex) Len() int {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return len(x.paths)
}

func (x *IDIndex) get(id uint64) (string, bool) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	if p, ok := x.paths[id]; ok {
		return p, true
	}
	g, ok := x.gone[id]
	return g.path, ok
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
	defer x.mu.Unlock()
	now := time.Now
	if x.now != nil {
		now = x.now
	}
	x.gone = keepGone(x.gone, x.paths, paths, now())
	x.paths = paths
	return nil
}

// keepGone returns the removed cgroups to keep: gone's and those of
// before that now lacks, as removed at now; not those past IDRetention,
// those found again (an id reused) or the oldest past MaxGoneIDs.
func keepGone(gone map[uint64]goneCgroup, before, now map[uint64]string, at time.Time) map[uint64]goneCgroup {
	for id, p := range before {
		if _, ok := now[id]; !ok {
			if gone == nil {
				gone = map[uint64]goneCgroup{}
			}
			gone[id] = goneCgroup{path: p, at: at}
		}
	}
	for id, g := range gone {
		if _, ok := now[id]; ok || at.Sub(g.at) > IDRetention {
			delete(gone, id)
		}
	}
	if over := len(gone) - MaxGoneIDs; over > 0 {
		ids := make([]uint64, 0, len(gone))
		for id := range gone {
			ids = append(ids, id)
		}
		slices.SortFunc(ids, func(a, b uint64) int { return gone[a].at.Compare(gone[b].at) })
		for _, id := range ids[:over] {
			delete(gone, id)
		}
	}
	return gone
}
