package signals

import (
	"encoding/binary"
	"slices"
)

// series is one run of a container, one cgroup: its name, start and
// samples. The samples are encoded in buf, oldest first (see cursor). The
// newest is kept decoded beside it, so that appending one costs no
// decoding.
type series struct {
	container string
	// started is the start's startKey.
	started int64
	// last is the newest sample, and lastDelta the time from the one
	// before it to it: the cursor after buf.
	last      reading
	lastDelta int64
	buf       []byte
	// n is the number of samples in buf, and lastOff where the newest
	// one's encoding starts.
	n, lastOff uint32
	// kept is n after the last compaction; the next runs when the series
	// has grown by a quarter.
	kept uint32
	gone bool
	// queued is set while the Kernel's queue of gone instances holds the
	// series; dropped once the pod no longer holds it (MaxInstancesPerPod).
	queued, dropped bool
	// oom is the instance's latest absolute OOM kill count, when oomKnown
	// (an agent read it).
	oom oomCount
}

// oomCount is a container instance's absolute OOM kill count as an agent
// last read it: the kernel's cumulative oom_kill counter of its cgroup.
type oomCount struct {
	kills uint64
	// at is when it was read (Unix ns).
	at    int64
	known bool
}

// reading is one sample's time (Unix ns) and counters.
type reading struct {
	at                 int64
	periods, throttled uint64
}

// maxEncoded bounds the bytes of one encoded reading: three varints.
const maxEncoded = 3 * binary.MaxVarintLen64

// cursor encodes and decodes a series' readings, each as three varints
// relative to the one before. The first reading is relative to zero.
//   - The change of the time step, a delta of deltas: a byte or two for an
//     agent that samples at a steady interval.
//   - The increases of the counters: a byte or two per second of CFS
//     periods.
//
// The differences wrap around, so any int64 time and uint64 counters come
// back exactly, a counter reset included.
type cursor struct {
	prev  reading
	delta int64
	any   bool
}

// put appends r's encoding to buf.
func (c *cursor) put(buf []byte, r reading) []byte {
	d := r.at - c.prev.at
	buf = binary.AppendVarint(buf, d-c.delta)
	buf = binary.AppendVarint(buf, int64(r.periods-c.prev.periods))
	buf = binary.AppendVarint(buf, int64(r.throttled-c.prev.throttled))
	c.advance(r, d)
	return buf
}

// next decodes the reading at the start of buf and returns it with its
// length; n is 0 when buf holds no whole reading.
func (c *cursor) next(buf []byte) (r reading, n int) {
	dod, n1 := binary.Varint(buf)
	dp, n2 := binary.Varint(buf[max(n1, 0):])
	dt, n3 := binary.Varint(buf[max(n1, 0)+max(n2, 0):])
	if n1 <= 0 || n2 <= 0 || n3 <= 0 {
		return reading{}, 0
	}
	d := c.delta + dod
	r = reading{at: c.prev.at + d, periods: c.prev.periods + uint64(dp), throttled: c.prev.throttled + uint64(dt)}
	c.advance(r, d)
	return r, n1 + n2 + n3
}

func (c *cursor) advance(r reading, d int64) {
	if !c.any {
		d = 0 // the first reading's time is absolute, not a step
	}
	c.prev, c.delta, c.any = r, d, true
}

// tail is the cursor after sr's newest reading.
func (sr *series) tail() cursor {
	return cursor{prev: sr.last, delta: sr.lastDelta, any: sr.n > 0}
}

// readings appends sr's readings at or before to (Unix ns), oldest first,
// to dst.
func (sr *series) readings(dst []reading, to int64) []reading {
	var c cursor
	for b := sr.buf; len(b) > 0; {
		r, n := c.next(b)
		if n == 0 || r.at > to {
			break
		}
		dst = append(dst, r)
		b = b[n:]
	}
	return dst
}

// push appends r, newer than sr's newest reading; room is how many more
// readings to make space for when buf must grow.
func (sr *series) push(r reading, room int) {
	if cap(sr.buf)-len(sr.buf) < maxEncoded {
		perReading := len(sr.buf)/max(int(sr.n), 1) + 1
		sr.buf = regrow(sr.buf, len(sr.buf)+maxEncoded+max(room, 1)*perReading)
	}
	c := sr.tail()
	off := len(sr.buf)
	sr.buf = c.put(sr.buf, r)
	sr.last, sr.lastDelta, sr.lastOff, sr.n = r, c.delta, uint32(off), sr.n+1
}

// replaceLast replaces sr's newest reading by r of the same time.
func (sr *series) replaceLast(r reading) {
	c := sr.tail()
	if sr.n > 1 {
		// Step back over the newest reading: its encoding holds the
		// differences from the one before.
		b := sr.buf[sr.lastOff:]
		dod, n1 := binary.Varint(b)
		dp, n2 := binary.Varint(b[n1:])
		dt, _ := binary.Varint(b[n1+n2:])
		c.prev = reading{at: sr.last.at - sr.lastDelta, periods: sr.last.periods - uint64(dp), throttled: sr.last.throttled - uint64(dt)}
		c.delta = sr.lastDelta - dod
	} else {
		c = cursor{}
	}
	sr.buf = c.put(sr.buf[:sr.lastOff], r)
	sr.last, sr.lastDelta = r, c.delta
}

// store replaces sr's readings by pts (oldest first), which must not share
// memory with sr.buf.
func (sr *series) store(pts []reading) {
	var c cursor
	buf := sr.buf[:0]
	off := 0
	for _, r := range pts {
		off = len(buf)
		buf = c.put(buf, r)
	}
	if cap(buf) > 2*len(buf)+64 {
		buf = regrow(buf, len(buf))
	}
	sr.buf, sr.n, sr.lastOff = buf, uint32(len(pts)), uint32(off)
	sr.last, sr.lastDelta = c.prev, c.delta
}

// dropOld is compact for a pod without pins, in the common case. It drops
// the readings before the latest one older than horizon, decoding only
// those, and reports whether it could. It cannot when the counters drop
// among them, nor when the first kept reading's encoding would not fit in
// place. The readings from the second kept one on keep their encoding,
// since the cursor before each is unchanged.
func (sr *series) dropOld(horizon int64) bool {
	var c cursor
	var a, b reading // the newest reading older than horizon, and the next
	k := -1          // a's index
	off, tail := 0, -1
	for i := 0; off < len(sr.buf); i++ {
		r, n := c.next(sr.buf[off:])
		if n == 0 {
			return false
		}
		off += n
		if r.at >= horizon {
			b, tail = r, off
			break
		}
		if k >= 0 && (r.periods < a.periods || r.throttled < a.throttled) {
			return false // a reset: keep both sides
		}
		a, k = r, i
	}
	switch {
	case k <= 0:
		return true // nothing older to drop
	case tail < 0:
		sr.store([]reading{a}) // all older: the newest alone
		return true
	}
	var head [2 * maxEncoded]byte
	var hc cursor
	h := hc.put(head[:0], a)
	bOff := len(h)
	h = hc.put(h, b)
	if len(h) > tail {
		return false
	}
	n := copy(sr.buf[len(h):], sr.buf[tail:])
	copy(sr.buf, h)
	sr.buf = sr.buf[:len(h)+n]
	if sr.lastOff >= uint32(tail) {
		sr.lastOff = sr.lastOff - uint32(tail) + uint32(len(h))
	} else {
		sr.lastOff = uint32(bOff) // b is the newest
	}
	sr.n -= uint32(k)
	if cap(sr.buf) > 2*len(sr.buf)+64 {
		sr.buf = regrow(sr.buf, len(sr.buf))
	}
	return true
}

// regrow returns buf's bytes in a new slice with room for at least size
// bytes. The capacity is the allocation's size class, so none is wasted.
func regrow(buf []byte, size int) []byte {
	return append(slices.Grow([]byte(nil), max(size, len(buf))), buf...)
}
