package recommend

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// CheckpointVersion is the version of the checkpoint form this package
// writes and the newest it reads. Bump it on any change a previous reader
// could not read (VPA's SupportedCheckpointVersion).
const CheckpointVersion = 1

// MaxCheckpointBytes bounds a checkpoint: two full histograms of 256 float32
// buckets, a throttling ring of 256 float32 and the header fit well within it.
const MaxCheckpointBytes = 4096

// checkpointMagic starts every checkpoint, so that other bytes are refused.
var checkpointMagic = [4]byte{'K', 'R', 'C', 'P'}

// AppendCheckpoint appends the state's checkpoint to dst, in a versioned
// binary form of at most MaxCheckpointBytes.
//   - It holds the magic, the version, the model's fingerprint, varint
//     times and counts, and float32 weights.
//   - It is exact for the state, whose times are whole seconds.
//   - The per-instance PeakWindows are not part of it.
func (s *ContainerState) AppendCheckpoint(m *Model, dst []byte) []byte {
	dst = append(dst, checkpointMagic[:]...)
	dst = binary.AppendUvarint(dst, CheckpointVersion)
	dst = binary.LittleEndian.AppendUint32(dst, m.fingerprint)
	dst = binary.AppendVarint(dst, s.first)
	dst = binary.AppendVarint(dst, s.last-s.first)
	dst = binary.AppendUvarint(dst, uint64(s.samples))
	dst = binary.AppendVarint(dst, s.oomAt)
	dst = binary.LittleEndian.AppendUint64(dst, math.Float64bits(s.oomPeak))
	dst = binary.AppendVarint(dst, int64(s.thrInterval))
	dst = appendFloats(dst, s.thr)
	dst = appendHistogram(dst, &s.CPU)
	return appendHistogram(dst, &s.Memory)
}

func appendFloats(dst []byte, w []float32) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(w)))
	for _, v := range w {
		dst = binary.LittleEndian.AppendUint32(dst, math.Float32bits(v))
	}
	return dst
}

func appendHistogram(dst []byte, h *Histogram) []byte {
	dst = binary.AppendVarint(dst, int64(h.ref))
	dst = append(dst, h.lo)
	return appendFloats(dst, h.w)
}

// ErrCheckpointNewer is returned for a checkpoint written by a newer
// recommender: this one cannot read it, and must not guess.
var ErrCheckpointNewer = errors.New("checkpoint is from a newer recommender")

// LoadCheckpoint reads a checkpoint written by AppendCheckpoint with the same
// model parameters. It refuses, with an error that says why, bytes that are
// not a checkpoint, a newer version, another model's fingerprint, a size
// over MaxCheckpointBytes, and out-of-range buckets or weights.
func LoadCheckpoint(m *Model, data []byte) (ContainerState, error) {
	var s ContainerState
	if len(data) > MaxCheckpointBytes {
		return s, fmt.Errorf("load checkpoint: %d bytes is over the limit of %d", len(data), MaxCheckpointBytes)
	}
	if len(data) < len(checkpointMagic) || [4]byte(data[:4]) != checkpointMagic {
		return s, errors.New("load checkpoint: not a Kerf recommender checkpoint (bad magic)")
	}
	r := reader{b: data[4:]}
	version := r.uvarint()
	if r.err == nil && version > CheckpointVersion {
		return s, fmt.Errorf("load checkpoint: version %d, this recommender reads up to %d: %w", version, CheckpointVersion, ErrCheckpointNewer)
	}
	if r.err == nil && version == 0 {
		return s, errors.New("load checkpoint: version 0 is not a valid version")
	}
	if fp := r.uint32(); r.err == nil && fp != m.fingerprint {
		return s, fmt.Errorf("load checkpoint: made with other bucket, half-life or interval parameters (fingerprint %08x, this model %08x)", fp, m.fingerprint)
	}
	s.first = r.varint()
	s.last = s.first + r.varint()
	samples := r.uvarint()
	if samples > math.MaxUint32 {
		r.fail("samples %d over 2^32-1", samples)
	}
	s.samples = uint32(samples)
	s.oomAt = r.varint()
	s.oomPeak = math.Float64frombits(r.uint64())
	s.thrInterval = r.int32()
	s.thr = r.floats(m.p.MemoryIntervals + 1)
	if s.thr != nil && len(s.thr) != m.p.MemoryIntervals+1 {
		r.fail("throttling ring of %d, the model has %d", len(s.thr), m.p.MemoryIntervals+1)
	}
	r.histogram(&s.CPU, &m.cpu, "cpu")
	r.histogram(&s.Memory, &m.mem, "memory")
	if r.err == nil && len(r.b) != 0 {
		r.fail("%d trailing bytes", len(r.b))
	}
	if r.err == nil && (math.IsNaN(s.oomPeak) || s.oomPeak < 0 || s.last < s.first) {
		r.fail("oomPeak %v or history [%d, %d] out of range", s.oomPeak, s.first, s.last)
	}
	if r.err != nil {
		return ContainerState{}, fmt.Errorf("load checkpoint: %w", r.err)
	}
	return s, nil
}

// reader decodes a checkpoint, remembering the first error.
type reader struct {
	b   []byte
	err error
}

func (r *reader) fail(format string, args ...any) {
	if r.err == nil {
		r.err = fmt.Errorf(format, args...)
	}
}

func (r *reader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.fail("truncated or overlong varint")
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) varint() int64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.fail("truncated or overlong varint")
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) int32() int32 {
	v := r.varint()
	if v < math.MinInt32 || v > math.MaxInt32 {
		r.fail("%d out of 32-bit range", v)
	}
	return int32(v)
}

func (r *reader) take(n int) []byte {
	if r.err != nil {
		return nil
	}
	if len(r.b) < n {
		r.fail("truncated: want %d bytes, have %d", n, len(r.b))
		return nil
	}
	b := r.b[:n]
	r.b = r.b[n:]
	return b
}

func (r *reader) uint32() uint32 {
	if b := r.take(4); b != nil {
		return binary.LittleEndian.Uint32(b)
	}
	return 0
}

func (r *reader) uint64() uint64 {
	if b := r.take(8); b != nil {
		return binary.LittleEndian.Uint64(b)
	}
	return 0
}

// floats reads a length-prefixed float32 list of at most limit values, each
// finite and non-negative; an empty list is nil.
func (r *reader) floats(limit int) []float32 {
	n := r.uvarint()
	if r.err != nil || n == 0 {
		return nil
	}
	if n > uint64(limit) {
		r.fail("%d values, at most %d allowed", n, limit)
		return nil
	}
	w := make([]float32, n)
	for i := range w {
		w[i] = math.Float32frombits(r.uint32())
		if v := float64(w[i]); math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
			r.fail("weight %v out of range", v)
		}
	}
	return w
}

func (r *reader) histogram(h *Histogram, d *decayShape, name string) {
	h.ref = r.int32()
	if b := r.take(1); b != nil {
		h.lo = b[0]
	}
	h.w = r.floats(len(d.starts))
	if r.err == nil && int(h.lo)+len(h.w) > len(d.starts) {
		r.fail("%s buckets %d..%d beyond the %d the model has", name, h.lo, int(h.lo)+len(h.w)-1, len(d.starts))
	}
	if h.w == nil {
		h.lo = 0
	}
}
