package recommend

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func defaultModel(t testing.TB) *Model {
	t.Helper()
	m, err := NewModel(DefaultParams())
	require.NoError(t, err)
	return m
}

// proportionalModel is the defaults with KeepLimitProportion, so a limit
// moves with its request (the tests written for that rule).
func proportionalModel(t testing.TB) *Model {
	t.Helper()
	p := DefaultParams()
	p.KeepLimitProportion = true
	m, err := NewModel(p)
	require.NoError(t, err)
	return m
}

var t0 = time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)

func TestSchemeMatchesVPABuckets(t *testing.T) {
	m := defaultModel(t)
	// VPA: 1000 cores from 0.01 and 1e12 bytes from 1e7, 5 % growth: 176 buckets each.
	assert.Len(t, m.cpu.starts, 176)
	assert.Len(t, m.mem.starts, 176)
	assert.Equal(t, 0.0, m.cpu.starts[0])
	assert.InDelta(t, 0.01, m.cpu.starts[1], 1e-15)
	assert.InDelta(t, 0.01+0.0105, m.cpu.starts[2], 1e-15)
	for b := 1; b < len(m.cpu.starts); b++ {
		assert.Equal(t, b, m.cpu.bucket(m.cpu.starts[b]), "start of bucket %d", b)
		assert.Equal(t, b-1, m.cpu.bucket(m.cpu.starts[b]*(1-1e-12)), "just below bucket %d", b)
	}
	assert.Equal(t, 0, m.cpu.bucket(-1))
	assert.Equal(t, 0, m.cpu.bucket(0.0099))
	assert.Equal(t, 175, m.cpu.bucket(1e9), "values past the top land in the last bucket")
}

func TestPercentileOnKnownDistributions(t *testing.T) {
	m := defaultModel(t)
	d := &m.cpu
	// Ten equal samples, one at the start of each of buckets 10..19.
	var tenBuckets Histogram
	for b := 10; b < 20; b++ {
		tenBuckets.add(d, d.starts[b], 1, t0.Unix())
	}
	// Three samples in bucket 30, one in 40 (a 75/25 split).
	var split Histogram
	for range 3 {
		split.add(d, d.starts[30], 1, t0.Unix())
	}
	split.add(d, d.starts[40], 1, t0.Unix())
	var top Histogram
	top.add(d, 1e6, 1, t0.Unix())

	tests := []struct {
		name string
		h    *Histogram
		p    float64
		want float64
	}{
		{"p0 is the end of the lowest bucket", &tenBuckets, 0, d.starts[11]},
		{"p50 of ten is the end of the fifth", &tenBuckets, 0.5, d.starts[15]},
		{"p90 of ten is the end of the ninth", &tenBuckets, 0.9, d.starts[19]},
		{"p91 of ten is the end of the tenth", &tenBuckets, 0.91, d.starts[20]},
		{"p100 of ten is the end of the tenth", &tenBuckets, 1, d.starts[20]},
		{"p75 reached exactly in the lower bucket", &split, 0.75, d.starts[31]},
		{"p76 is in the upper bucket", &split, 0.76, d.starts[41]},
		{"the last bucket returns its start", &top, 0.9, d.starts[175]},
		{"empty is zero", &Histogram{}, 0.9, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, tt.h.percentile(d, tt.p))
		})
	}
}

func TestPercentileOfUniformUsageIsWithinOneBucket(t *testing.T) {
	m := defaultModel(t)
	var h Histogram
	for i := 1; i <= 1000; i++ { // 0.001 .. 1.000 cores
		h.add(&m.cpu, float64(i)/1000, 1, t0.Unix())
	}
	for _, p := range []float64{0.5, 0.9, 0.95} {
		got := h.percentile(&m.cpu, p)
		assert.GreaterOrEqual(t, got, p, "p%v", p)
		assert.LessOrEqual(t, got, p*1.05+0.001, "p%v errs up by at most one bucket", p)
	}
}

func TestDecayHalvesWeightAfterExactlyOneHalfLife(t *testing.T) {
	m := defaultModel(t)
	d := &m.cpu
	tests := []struct {
		name  string
		age   time.Duration
		ratio float32
	}{
		{"one half-life", 24 * time.Hour, 2},
		{"two half-lives", 48 * time.Hour, 4},
		{"half a half-life", 12 * time.Hour, 1.4142135},
		{"same time", 0, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var h Histogram
			h.add(d, 0.1, 1, t0.Unix())
			h.add(d, 0.5, 1, t0.Add(tt.age).Unix())
			old := h.w[d.bucket(0.1)-int(h.lo)]
			young := h.w[d.bucket(0.5)-int(h.lo)]
			assert.Equal(t, tt.ratio, young/old)
		})
	}
	// With weights 1 and 2, p(1/3) is the old sample and anything above it the new one.
	var h Histogram
	h.add(d, 0.1, 1, t0.Unix())
	h.add(d, 0.5, 1, t0.Add(24*time.Hour).Unix())
	assert.Equal(t, d.starts[d.bucket(0.1)+1], h.percentile(d, 1.0/3))
	assert.Equal(t, d.starts[d.bucket(0.5)+1], h.percentile(d, 0.34))
}

func TestRenormalisationShiftsTheReferenceAndKeepsRatios(t *testing.T) {
	m := defaultModel(t)
	d := &m.cpu
	day := 24 * time.Hour
	var h Histogram
	h.add(d, 0.01, 1, t0.Unix()) // sets the reference to t0
	ref0 := h.ref
	h.add(d, 0.1, 1, t0.Add(15*day).Unix())
	h.add(d, 0.2, 1, t0.Add(16*day).Unix())
	require.Equal(t, ref0, h.ref, "no shift within %d half-lives", maxDecayExponent)
	h.add(d, 0.4, 1, t0.Add(22*day).Unix()) // 22 > 20 half-lives: shift
	assert.Equal(t, ref0+22, h.ref)
	assert.Equal(t, d.bucket(0.1), int(h.lo), "the t0 sample decayed below epsilon and its bucket was trimmed")
	w := func(v float64) float32 { return h.w[d.bucket(v)-int(h.lo)] }
	assert.Equal(t, float32(1)/128, w(0.1), "2^-7 after the shift")
	assert.Equal(t, float32(2), w(0.2)/w(0.1))
	assert.Equal(t, float32(1), w(0.4))
}

func TestSubtractEmptiesABucketAndTrims(t *testing.T) {
	m := defaultModel(t)
	d := &m.mem
	var h Histogram
	h.add(d, 100*Mi, 1, t0.Unix())
	h.add(d, 300*Mi, 1, t0.Unix())
	h.subtract(d, 300*Mi, 1, t0.Unix())
	assert.Len(t, h.w, 1)
	assert.Equal(t, d.bucket(100*Mi), int(h.lo))
	h.subtract(d, 100*Mi, 1, t0.Unix())
	assert.True(t, h.Empty())
}
