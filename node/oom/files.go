package oom

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kerf-dev/kerf/cgroup"
)

// filesSource counts kills from the cgroup files that count them:
// memory.oom_control's oom_kill on v1, memory.events' oom_kill on v2. It is
// told of a change by the kernel (an eventfd registered in
// cgroup.event_control on v1, inotify on memory.events on v2) and re-reads
// every counter each Interval as the last resort. It cannot see a victim's
// pid, and a kill in a cgroup that is removed before it is read is seen only
// by the other sources.
type filesSource struct {
	memory   cgroup.Mount
	root     string
	interval time.Duration

	epfd    int // epoll: the notifications and stopfd
	stopfd  int // eventfd written when Run's context ends
	inotify int // v2 only, -1 otherwise
	watched map[string]*watchedCgroup
	byWD    map[int32]*watchedCgroup
	// notified counts cgroups whose notifications were set up, for Detail.
	notified int
}

type watchedCgroup struct {
	path   string // cgroup path within the hierarchy
	id     uint64
	reader cgroup.OOMKillReader
	last   uint64
	efd    int   // v1 eventfd, -1 if none
	ctlfd  int   // v1 memory.oom_control fd the eventfd is registered on
	wd     int32 // v2 inotify watch, -1 if none
}

func openFiles(opts Options) (Source, error) {
	memory, ok := opts.Hierarchy.Controller("memory")
	if !ok {
		return nil, errors.New("the memory cgroup controller is not mounted")
	}
	s := &filesSource{memory: memory, root: opts.Root, interval: opts.Interval,
		inotify: -1, stopfd: -1, watched: map[string]*watchedCgroup{}, byWD: map[int32]*watchedCgroup{}}
	var err error
	if s.epfd, err = unix.EpollCreate1(unix.EPOLL_CLOEXEC); err != nil {
		return nil, fmt.Errorf("epoll_create1: %w", err)
	}
	if s.stopfd, err = unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK); err != nil {
		s.Close()
		return nil, fmt.Errorf("eventfd: %w", err)
	}
	if err = s.epollAdd(s.stopfd); err != nil {
		s.Close()
		return nil, err
	}
	if memory.Version == 2 {
		if s.inotify, err = unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK); err != nil {
			s.Close()
			return nil, fmt.Errorf("inotify_init1: %w", err)
		}
		if err = s.epollAdd(s.inotify); err != nil {
			s.Close()
			return nil, err
		}
	}
	// Kills from before Run are not delivered: the first scan takes each
	// counter as it is as the baseline.
	if err := s.scan(true); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

func (s *filesSource) epollAdd(fd int) error {
	ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(fd)}
	if err := unix.EpollCtl(s.epfd, unix.EPOLL_CTL_ADD, fd, &ev); err != nil {
		return fmt.Errorf("epoll_ctl add: %w", err)
	}
	return nil
}

func (s *filesSource) Name() string { return KindCgroup }

func (s *filesSource) Detail() string {
	file := "memory.oom_control"
	how := "eventfd"
	if s.memory.Version == 2 {
		file, how = "memory.events", "inotify"
	}
	return fmt.Sprintf("%s under %s, %s for %d cgroups, polled every %s", file, s.root, how, s.notified, s.interval)
}

// scan walks the subtree, starts watching new cgroups and stops watching
// removed ones. A cgroup found by the first scan starts from its current
// count; one found later was created after the source started and counts
// from zero.
func (s *filesSource) scan(first bool) error {
	top, err := s.memory.Join(s.root)
	if err != nil {
		return err
	}
	seen := make(map[string]bool, len(s.watched))
	err = filepath.WalkDir(top, func(dir string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil // removed while walking, or no pods yet
			}
			return err
		}
		if !d.IsDir() {
			return nil
		}
		p, err := s.memory.Rel(dir)
		if err != nil {
			return err
		}
		seen[p] = true
		if _, ok := s.watched[p]; !ok {
			s.watch(p, dir, first)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("scan %s: %w", top, err)
	}
	for p, w := range s.watched {
		if !seen[p] {
			s.unwatch(w)
		}
	}
	return nil
}

func (s *filesSource) watch(p, dir string, baseline bool) {
	r, err := cgroup.OpenOOMKillsAt(s.memory, dir)
	if err != nil {
		return // removed meanwhile, or not a memory cgroup directory
	}
	w := &watchedCgroup{path: p, reader: r, efd: -1, ctlfd: -1, wd: -1}
	w.id, _ = cgroup.CgroupID(dir)
	if baseline {
		w.last, _ = r.OOMKills()
	}
	if s.memory.Version == 2 {
		if wd, err := unix.InotifyAddWatch(s.inotify, filepath.Join(dir, "memory.events"), unix.IN_MODIFY); err == nil {
			w.wd = int32(wd)
			s.byWD[w.wd] = w
			s.notified++
		}
	} else if err := s.registerEventfd(w, dir); err == nil {
		s.notified++
	}
	s.watched[p] = w
}

// registerEventfd asks a v1 memory cgroup to signal an eventfd on OOM
// (Documentation/admin-guide/cgroup-v1/memory.rst, "OOM Control").
func (s *filesSource) registerEventfd(w *watchedCgroup, dir string) error {
	ctl, err := unix.Open(filepath.Join(dir, "memory.oom_control"), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		unix.Close(ctl)
		return err
	}
	line := strconv.Itoa(efd) + " " + strconv.Itoa(ctl)
	if err := os.WriteFile(filepath.Join(dir, "cgroup.event_control"), []byte(line), 0); err != nil {
		unix.Close(efd)
		unix.Close(ctl)
		return err
	}
	if err := s.epollAdd(efd); err != nil {
		unix.Close(efd)
		unix.Close(ctl)
		return err
	}
	w.efd, w.ctlfd = efd, ctl
	return nil
}

func (s *filesSource) unwatch(w *watchedCgroup) {
	if w.efd >= 0 {
		_ = unix.EpollCtl(s.epfd, unix.EPOLL_CTL_DEL, w.efd, nil)
		unix.Close(w.efd)
		unix.Close(w.ctlfd)
		s.notified--
	}
	if w.wd >= 0 {
		_, _ = unix.InotifyRmWatch(s.inotify, uint32(w.wd))
		delete(s.byWD, w.wd)
		s.notified--
	}
	_ = w.reader.Close()
	delete(s.watched, w.path)
}

// check re-reads every watched counter and emits the increases.
func (s *filesSource) check(emit func(Kill)) {
	now := time.Now()
	for _, w := range s.watched {
		n, err := w.reader.OOMKills()
		if err != nil || n <= w.last {
			continue
		}
		k := Kill{Source: KindCgroup, Time: now, Cgroup: w.path, CgroupID: w.id, Count: n - w.last}
		w.last = n
		resolve(&k)
		emit(k)
	}
}

// recheckAfter are the delays, after a notification, at which every counter
// is read again: v1 signals the eventfd when the cgroup runs out of memory,
// before the OOM killer has picked and counted its victim.
var recheckAfter = []time.Duration{2 * time.Millisecond, 10 * time.Millisecond, 50 * time.Millisecond, 200 * time.Millisecond}

func (s *filesSource) Run(ctx context.Context, emit func(Kill)) error {
	// Wake epoll_wait when ctx ends; the write must be over before Close
	// may close the eventfd (its number could be reused).
	stopfd, woken := s.stopfd, make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		defer close(woken)
		var one = [8]byte{1}
		_, _ = unix.Write(stopfd, one[:])
	})
	defer func() {
		if !stop() {
			<-woken
		}
	}()
	events := make([]unix.EpollEvent, 64)
	buf := make([]byte, 4096)
	lastScan := time.Now()
	var rechecks []time.Time // pending re-reads after a notification
	for {
		wake := lastScan.Add(s.interval)
		if len(rechecks) > 0 && rechecks[0].Before(wake) {
			wake = rechecks[0]
		}
		timeout := max(time.Until(wake), 0)
		n, err := unix.EpollWait(s.epfd, events, int((timeout+time.Millisecond-1)/time.Millisecond))
		if err != nil && !errors.Is(err, unix.EINTR) {
			return fmt.Errorf("epoll_wait: %w", err)
		}
		for _, ev := range events[:max(n, 0)] {
			fd := int(ev.Fd)
			if fd == s.stopfd {
				return nil
			}
			// Drain the eventfd or inotify queue; which cgroup fired does
			// not matter, every counter is re-read below.
			for {
				if _, err := unix.Read(fd, buf); err != nil {
					break
				}
			}
		}
		now := time.Now()
		if n > 0 {
			rechecks = rechecks[:0]
			for _, d := range recheckAfter {
				rechecks = append(rechecks, now.Add(d))
			}
		}
		for len(rechecks) > 0 && !rechecks[0].After(now) {
			rechecks = rechecks[1:]
		}
		if now.Sub(lastScan) >= s.interval {
			if err := s.scan(false); err != nil {
				return err
			}
			lastScan = now
		}
		s.check(emit)
	}
}

func (s *filesSource) Close() error {
	for _, w := range s.watched {
		s.unwatch(w)
	}
	for _, fd := range []int{s.inotify, s.stopfd, s.epfd} {
		if fd >= 0 {
			unix.Close(fd)
		}
	}
	s.inotify, s.stopfd, s.epfd = -1, -1, -1
	return nil
}
