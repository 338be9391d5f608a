package recommend

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// denseFloat64 is VPA's layout (every bucket, float64 weights, reference at
// the first sample), the reference the compact Histogram is measured against.
type denseFloat64 struct {
	w   []float64
	ref int64
}

func (h *denseFloat64) add(d *decayShape, v float64, t int64) {
	if h.w == nil {
		h.w = make([]float64, len(d.starts))
		h.ref = t
	}
	h.w[d.bucket(v)] += math.Exp2(float64(t-h.ref) / float64(d.halfLife))
}

func (h *denseFloat64) percentile(d *decayShape, p float64) float64 {
	var total, partial float64
	lo, hi := -1, 0
	for b, w := range h.w {
		total += w
		if w > 0 {
			if lo < 0 {
				lo = b
			}
			hi = b
		}
	}
	b := lo
	for ; b < hi; b++ {
		partial += h.w[b]
		if partial >= p*total {
			break
		}
	}
	if b < len(d.starts)-1 {
		return d.starts[b+1]
	}
	return d.starts[b]
}

// TestFloat32WeightsGiveVPAPercentiles measures the precision cost of the
// compact layout: eight days of one-a-minute CPU samples for 200 containers,
// p50/p90/p95 from float32 weights against float64 dense weights.
func TestFloat32WeightsGiveVPAPercentiles(t *testing.T) {
	if testing.Short() {
		t.Skip("2.3 million samples")
	}
	m := defaultModel(t)
	var compared, differ int
	for i := range 200 {
		rng := rand.New(rand.NewPCG(uint64(i), 7))
		mean := math.Exp(math.Log(0.01) + rng.Float64()*(math.Log(2)-math.Log(0.01)))
		var compact Histogram
		var dense denseFloat64
		for k := 0; k < 8*24*60; k++ {
			v := mean * math.Exp(0.4*rng.NormFloat64())
			ts := t0.Add(time.Duration(k) * time.Minute).Unix()
			compact.add(&m.cpu, v, 1, ts)
			dense.add(&m.cpu, v, ts)
		}
		for _, p := range []float64{0.5, 0.9, 0.95} {
			compared++
			if compact.percentile(&m.cpu, p) != dense.percentile(&m.cpu, p) {
				differ++
			}
		}
	}
	t.Logf("float32 vs float64 percentiles: %d of %d differ", differ, compared)
	assert.LessOrEqual(t, differ, compared/100, "at most 1 %% of percentiles move (by one bucket, 5 %%)")
}
