package recommend

import (
	"math"
)

// scheme is an exponential bucket layout, as VPA's
// exponentialHistogramOptions. Bucket 0 is [0, first). Each later bucket
// is (1+growth) times as wide as the one before, so a value is known to
// within the growth fraction.
type scheme struct {
	first  float64
	ratio  float64
	starts []float64 // starts[b] is where bucket b begins; starts[0] is 0
}

// bucketCount is how many buckets reach maxValue (VPA's formula).
func bucketCount(maxValue, first, ratio float64) int {
	return int(math.Ceil(math.Log(maxValue*(ratio-1)/first+1)/math.Log(ratio))) + 1
}

func newScheme(first, maxValue, growth float64) scheme {
	ratio := 1 + growth
	n := bucketCount(maxValue, first, ratio)
	s := scheme{first: first, ratio: ratio, starts: make([]float64, n)}
	for b := 1; b < n; b++ {
		s.starts[b] = first * (math.Pow(ratio, float64(b)) - 1) / (ratio - 1)
	}
	return s
}

// bucket is the bucket that holds v: the last one whose start is <= v.
func (s *scheme) bucket(v float64) int {
	if !(v >= s.first) { // also NaN and negatives
		return 0
	}
	n := len(s.starts)
	b := int(math.Log(v*(s.ratio-1)/s.first+1) / math.Log(s.ratio))
	if b >= n {
		b = n - 1
	}
	// The logarithm can be one off at a boundary; the table is exact.
	for b+1 < n && s.starts[b+1] <= v {
		b++
	}
	for b > 0 && s.starts[b] > v {
		b--
	}
	return b
}

// maxDecayExponent is how many half-lives a sample may be ahead of the
// reference before the histogram is renormalised. VPA uses 100 with float64
// weights; 20 keeps float32 weights far from overflow (2^20 per sample) and
// drops long-decayed edge buckets every 20 half-lives.
const maxDecayExponent = 20

// Histogram is a decaying histogram over a scheme, kept compact: only the
// buckets from lo to lo+len(w)-1 are stored, as float32 weights. A sample at
// time t has weight 2^((t - ref)/halfLife), so newer samples weigh more and
// each half-life halves a sample's importance. Only relative weights
// matter. So ref is moved forward (VPA's reference-timestamp trick) and
// the weights scaled down whenever the exponent grows past
// maxDecayExponent.
type Histogram struct {
	w   []float32
	ref int32 // reference time in half-lives since the Unix epoch
	lo  uint8
}

// decayShape is what a Histogram needs from the model: its scheme, its
// half-life in seconds, and the empty-bucket threshold.
type decayShape struct {
	scheme
	halfLife int64
	epsilon  float64
}

// Empty reports whether the histogram holds no weight.
func (h *Histogram) Empty() bool { return len(h.w) == 0 }

// factor is the weight multiplier of a sample at unix second t, after
// renormalising when t is too far ahead of the reference.
func (h *Histogram) factor(d *decayShape, t int64) float64 {
	if h.Empty() {
		h.ref = int32(roundDiv(t, d.halfLife))
	}
	exp := float64(t-int64(h.ref)*d.halfLife) / float64(d.halfLife)
	if exp > maxDecayExponent {
		h.shift(d, int32(roundDiv(t, d.halfLife)))
		exp = float64(t-int64(h.ref)*d.halfLife) / float64(d.halfLife)
	}
	return math.Exp2(exp)
}

// shift moves the reference to ref half-lives, scaling every weight by
// 2^(old-new) and dropping edge buckets that fall below epsilon.
func (h *Histogram) shift(d *decayShape, ref int32) {
	scale := math.Ldexp(1, int(h.ref-ref))
	for i := range h.w {
		h.w[i] = float32(float64(h.w[i]) * scale)
	}
	h.ref = ref
	h.trim(d.epsilon, true)
}

// trim drops leading and trailing buckets below epsilon. compact copies
// what is left into a slice of its own size, so that the memory is freed.
func (h *Histogram) trim(epsilon float64, compact bool) {
	i, j := 0, len(h.w)
	for i < j && float64(h.w[i]) < epsilon {
		i++
	}
	for j > i && float64(h.w[j-1]) < epsilon {
		j--
	}
	if i == j {
		h.w, h.lo = nil, 0
		return
	}
	if i == 0 && j == len(h.w) {
		return
	}
	if compact {
		w := make([]float32, j-i)
		copy(w, h.w[i:j])
		h.w = w
	} else {
		h.w = h.w[i:j:j]
	}
	h.lo += uint8(i)
}

// cover makes bucket b part of the stored range and returns its index in w.
func (h *Histogram) cover(b int) int {
	if len(h.w) == 0 {
		h.w = make([]float32, 1)
		h.lo = uint8(b)
		return 0
	}
	lo, hi := int(h.lo), int(h.lo)+len(h.w)-1
	if b >= lo && b <= hi {
		return b - lo
	}
	nlo, nhi := min(lo, b), max(hi, b)
	w := make([]float32, nhi-nlo+1)
	copy(w[lo-nlo:], h.w)
	h.w, h.lo = w, uint8(nlo)
	return b - nlo
}

// add adds a sample of value v and weight at unix second t.
func (h *Histogram) add(d *decayShape, v, weight float64, t int64) {
	f := weight * h.factor(d, t)
	if !(f >= math.SmallestNonzeroFloat32) || math.IsInf(f, 0) {
		return // nothing a float32 can hold
	}
	i := h.cover(d.bucket(v))
	h.w[i] = float32(float64(h.w[i]) + f)
}

// subtract removes a sample added before with the same value, weight and
// time; a bucket left below epsilon is emptied.
func (h *Histogram) subtract(d *decayShape, v, weight float64, t int64) {
	if h.Empty() {
		return
	}
	b := d.bucket(v) - int(h.lo)
	if b < 0 || b >= len(h.w) {
		return
	}
	f := weight * h.factor(d, t)
	nw := float64(h.w[b]) - f
	if nw < d.epsilon {
		nw = 0
	}
	h.w[b] = float32(nw)
	h.trim(d.epsilon, false) // a peak is usually replaced next: keep the slice
}

// total is the sum of the weights.
func (h *Histogram) total() float64 {
	var sum float64
	for _, w := range h.w {
		sum += float64(w)
	}
	return sum
}

// percentile is VPA's: the end of the first bucket at which the
// cumulative weight reaches p of the total. It is the start of the last
// bucket if that is the one, and 0 when empty. Returning a bucket's end
// errs upward, by at most the growth fraction.
func (h *Histogram) percentile(d *decayShape, p float64) float64 {
	return h.percentileOf(d, p, h.total())
}

// percentileOf is percentile with the total weight already summed.
func (h *Histogram) percentileOf(d *decayShape, p, total float64) float64 {
	if h.Empty() {
		return 0
	}
	threshold := p * total
	var partial float64
	i := 0
	for ; i < len(h.w)-1; i++ {
		partial += float64(h.w[i])
		if partial >= threshold {
			break
		}
	}
	b := int(h.lo) + i
	if b < len(d.starts)-1 {
		return d.starts[b+1]
	}
	return d.starts[b]
}

// roundDiv is a/b rounded half up, for b > 0.
func roundDiv(a, b int64) int64 {
	return int64(math.Floor(float64(a)/float64(b) + 0.5))
}
