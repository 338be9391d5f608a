package scale

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// usage samples the leader's CPU and RSS every second.
type usage struct {
	mu    sync.Mutex
	times []time.Time
	cpus  []time.Duration
	rss   []uint64
	// anon and file are each sample's RSS parts (procMemory).
	anon, file []uint64
	// hwm is the last VmHWM read, and hwmRose the second it was first
	// read: the peak the kernel kept, which can fall between two samples
	// of the RSS (a burst shorter than a second).
	hwm     uint64
	hwmRose time.Time
	// peakProfile is the RSS at which the last heap-peak.pb.gz was
	// written, and peakProfileAt when; peakTried is when one was last
	// asked for.
	peakProfile   uint64
	peakProfileAt time.Time
	peakTried     time.Time
}

// peakProfileName is the heap profile the sampler writes when the
// leader's RSS reaches a new high (at most every peakProfileEvery, with
// $KERF_SCALE_PROFILE): what was live at the GC before the run's highest
// RSS, where one snapshot at a fixed time misses a burst of a few seconds.
const (
	peakProfileName  = "heap-peak.pb.gz"
	peakProfileEvery = 10 * time.Second
)

func sampleUsage(ctx context.Context, p *leaderProc) *usage {
	u := &usage{}
	go func() {
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			m := p.status()
			rss, now := m.rss, time.Now()
			u.mu.Lock()
			u.times, u.cpus, u.rss = append(u.times, now), append(u.cpus, p.cpu()), append(u.rss, rss)
			u.anon, u.file = append(u.anon, m.anon), append(u.file, m.file)
			if m.hwm > u.hwm {
				u.hwm, u.hwmRose = m.hwm, now
			}
			higher := rss > u.peakProfile && now.Sub(u.peakTried) >= peakProfileEvery
			if higher {
				u.peakTried = now
			}
			u.mu.Unlock()
			// No GC first: the profile shows the last GC's live heap, and
			// the leader runs undisturbed. A failed write leaves the last
			// one, and its RSS.
			if higher {
				if path, err := p.writeHeapProfile(peakProfileName, false); err == nil && path != "" {
					u.mu.Lock()
					u.peakProfile, u.peakProfileAt = rss, now
					u.mu.Unlock()
				}
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return u
}

// logPeakProfile says at what RSS and when the sampler last wrote
// heap-peak.pb.gz, measured from the wave's start, if it wrote one.
func (u *usage) logPeakProfile(tb testing.TB, waveFrom time.Time) {
	u.mu.Lock()
	rss, at := u.peakProfile, u.peakProfileAt
	u.mu.Unlock()
	if rss == 0 {
		return // none written
	}
	path := filepath.Join(os.Getenv(profileEnv), peakProfileName)
	tb.Logf("the leader's heap profile at its highest RSS sampled (%d MiB, %.0f s from the wave's start; the last GC's live heap): %s", rss>>20, at.Sub(waveFrom).Seconds(), path)
}

// over returns the mean CPU (cores) between from and to, and the highest
// mean over any window of win within it.
func (u *usage) over(from, to time.Time, win time.Duration) (mean, peak float64) {
	u.mu.Lock()
	defer u.mu.Unlock()
	var ts []time.Time
	var cs []time.Duration
	for k, t := range u.times {
		if !t.Before(from) && !t.After(to) {
			ts, cs = append(ts, t), append(cs, u.cpus[k])
		}
	}
	if len(ts) < 2 {
		return 0, 0
	}
	mean = (cs[len(cs)-1] - cs[0]).Seconds() / ts[len(ts)-1].Sub(ts[0]).Seconds()
	for a := range ts {
		for b := a + 1; b < len(ts); b++ {
			if ts[b].Sub(ts[a]) >= win {
				peak = max(peak, (cs[b]-cs[a]).Seconds()/ts[b].Sub(ts[a]).Seconds())
				break
			}
		}
	}
	return mean, peak
}

// rssPeak is the highest RSS sampled between from and to, and when.
func (u *usage) rssPeak(from, to time.Time) (peak uint64, at time.Time) {
	m, at := u.highest(from, to)
	return m.rss, at
}

// highest is the sample of the highest RSS between from and to: its RSS,
// its parts (anonymous and file-backed) and when it was taken.
func (u *usage) highest(from, to time.Time) (m procMemory, at time.Time) {
	u.mu.Lock()
	defer u.mu.Unlock()
	for k, t := range u.times {
		if !t.Before(from) && !t.After(to) && u.rss[k] > m.rss {
			m, at = procMemory{rss: u.rss[k], anon: u.anon[k], file: u.file[k]}, t
		}
	}
	return m, at
}

// hwmRise is the highest VmHWM read and the second it was first read.
func (u *usage) hwmRise() (hwm uint64, at time.Time) {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.hwm, u.hwmRose
}

// write keeps the samples in $KERF_SCALE_PROFILE as name, a CSV of the
// seconds since the wave began (negative before it), the CPU seconds
// used and the RSS in MiB with its parts: the shape of a peak, which the
// figures above reduce to its height and time.
func (u *usage) write(tb testing.TB, name string, waveFrom time.Time) {
	dir := os.Getenv(profileEnv)
	if dir == "" {
		return
	}
	u.mu.Lock()
	var out strings.Builder
	out.WriteString("wave_s,cpu_s,rss_mib,anon_mib,file_mib\n")
	for k, t := range u.times {
		fmt.Fprintf(&out, "%.1f,%.3f,%.1f,%.1f,%.1f\n", t.Sub(waveFrom).Seconds(), u.cpus[k].Seconds(),
			float64(u.rss[k])/(1<<20), float64(u.anon[k])/(1<<20), float64(u.file[k])/(1<<20))
	}
	u.mu.Unlock()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(out.String()), 0o644); err != nil {
		tb.Logf("keep the leader's samples: %v", err)
		return
	}
	tb.Logf("the leader's CPU and RSS every second: %s", path)
	u.logPeakProfile(tb, waveFrom)
}

// harnessCPU is this process's user+sys CPU time so far: the harness's,
// its 1,000 agents' clients included.
func harnessCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
