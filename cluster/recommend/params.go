package recommend

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// Mi is one mebibyte, the unit of Kerf's memory defaults.
const Mi = 1 << 20

// Params holds every parameter of the recommender. DefaultParams gives the
// defaults; a policy's spec.recommend overrides them field by field. The
// bucket and half-life fields shape the stored state, so a checkpoint records
// them and is refused when they differ.
type Params struct {
	// CPUFirstBucket is the width of the first CPU bucket in cores (VPA: 0.01).
	CPUFirstBucket float64
	// CPUMaxValue is the largest CPU usage the buckets resolve, in cores (VPA: 1000).
	CPUMaxValue float64
	// MemoryFirstBucket is the width of the first memory bucket in bytes (VPA: 1e7).
	MemoryFirstBucket float64
	// MemoryMaxValue is the largest memory peak the buckets resolve, in bytes (VPA: 1e12).
	MemoryMaxValue float64
	// BucketGrowth is how much wider each bucket is than the one before it
	// (VPA: 0.05, so a value is known to within 5 %).
	BucketGrowth float64
	// Epsilon is the weight below which a bucket counts as empty, relative
	// to one fresh sample (VPA: 0.001 of its minimum sample weight).
	Epsilon float64

	// CPUHalfLife is the time after which a CPU sample has half its weight (VPA: 24h).
	CPUHalfLife time.Duration
	// MemoryHalfLife is the time after which a memory peak has half its weight (VPA: 24h).
	MemoryHalfLife time.Duration
	// MemoryInterval is the length of one memory aggregation interval: the
	// histogram holds one peak per container per interval (VPA: 24h).
	MemoryInterval time.Duration
	// MemoryIntervals is how many intervals make the lookback window (VPA: 8).
	// The window (MemoryInterval × MemoryIntervals) is also the latches' window.
	MemoryIntervals int

	// CPUPercentile is the CPU usage percentile the target starts from (VPA: 0.9).
	CPUPercentile float64
	// MemoryPercentile is the memory peak percentile the target starts from (VPA: 0.9).
	MemoryPercentile float64
	// LowerPercentile is the percentile of the reported lower bound (VPA: 0.5).
	LowerPercentile float64
	// UpperPercentile is the percentile of the reported upper bound (VPA: 0.95).
	UpperPercentile float64
	// SafetyMargin is the fraction added to every percentile (VPA: 0.15).
	SafetyMargin float64
	// ConfidenceInterval is the history length that counts as one unit of
	// confidence for the bounds (VPA: 24h; at one sample a minute).
	ConfidenceInterval time.Duration
	// MinCPUMilli is the smallest CPU request recommended for a pod, shared
	// by its containers, in millicores (VPA: 25).
	MinCPUMilli int64
	// MinMemoryBytes is the smallest memory request recommended for a pod,
	// shared by its containers, in bytes (VPA: 250 Mi).
	MinMemoryBytes int64

	// MinHistory is how long the history must be before anything is
	// recommended (default 24h; tests and the demo set it short).
	MinHistory time.Duration
	// MinChange is the smallest relative change of a request that is
	// recommended (default 0.10); smaller changes keep the current values.
	MinChange float64
	// UpscaleOnlyCPU makes the CPU request and limit never go down.
	UpscaleOnlyCPU bool
	// UpscaleOnlyMemory makes the memory request and limit never go down.
	UpscaleOnlyMemory bool
	// KeepLimitProportion scales a limit with its request, keeping the
	// manifest's limit/request ratio. False, the default, keeps limits as
	// they are, raised only to stay at or above the request; a Guaranteed
	// pod's limits follow its requests either way (Input.Guaranteed).
	KeepLimitProportion bool

	// ThrottlingRatio is the policy's throttlingRatio: a CFS throttling
	// ratio at or above it in the window latches CPU (default 0.25).
	ThrottlingRatio float64
	// OOMBumpBytes is the least a memory recommendation exceeds the peak
	// after an OOM kill, before the safety margin (VPA and Kerf: 100 Mi).
	OOMBumpBytes int64
	// OOMBumpRatio is the least factor a memory recommendation exceeds the
	// peak by after an OOM kill (VPA and Kerf: 1.2).
	OOMBumpRatio float64
}

// DefaultParams returns the defaults: VPA's where Kerf kept them, Kerf's
// guards and latches otherwise (docs/recommender.md lists both).
func DefaultParams() Params {
	return Params{
		CPUFirstBucket:    0.01,
		CPUMaxValue:       1000,
		MemoryFirstBucket: 1e7,
		MemoryMaxValue:    1e12,
		BucketGrowth:      0.05,
		Epsilon:           0.001,

		CPUHalfLife:     24 * time.Hour,
		MemoryHalfLife:  24 * time.Hour,
		MemoryInterval:  24 * time.Hour,
		MemoryIntervals: 8,

		CPUPercentile:      0.9,
		MemoryPercentile:   0.9,
		LowerPercentile:    0.5,
		UpperPercentile:    0.95,
		SafetyMargin:       0.15,
		ConfidenceInterval: 24 * time.Hour,
		MinCPUMilli:        25,
		MinMemoryBytes:     250 * Mi,

		MinHistory:          24 * time.Hour,
		MinChange:           0.10,
		KeepLimitProportion: false,

		ThrottlingRatio: 0.25,
		OOMBumpBytes:    100 * Mi,
		OOMBumpRatio:    1.2,
	}
}

// Window is the lookback window: MemoryInterval × MemoryIntervals (8 days by
// default). Memory peaks, OOM kills and throttling older than it are ignored.
func (p Params) Window() time.Duration {
	return p.MemoryInterval * time.Duration(p.MemoryIntervals)
}

// maxBuckets is the most buckets a scheme may have: bucket indices are stored
// in one byte.
const maxBuckets = 256

// Validate reports every field that is out of range, each error naming the
// field and what it allows.
func (p Params) Validate() error {
	var errs []error
	bad := func(field, allowed string, got any) {
		errs = append(errs, fmt.Errorf("%s: must be %s, got %v", field, allowed, got))
	}
	positive := func(field string, v float64) {
		if !(v > 0) || math.IsInf(v, 0) {
			bad(field, "a finite number > 0", v)
		}
	}
	fraction := func(field string, v float64) {
		if !(v > 0 && v <= 1) {
			bad(field, "in (0, 1]", v)
		}
	}
	duration := func(field string, d time.Duration) {
		// Whole minutes keep reference times and interval indices in 32 bits.
		if d < time.Minute {
			bad(field, "at least 1m", d)
		}
	}
	positive("CPUFirstBucket", p.CPUFirstBucket)
	positive("CPUMaxValue", p.CPUMaxValue)
	positive("MemoryFirstBucket", p.MemoryFirstBucket)
	positive("MemoryMaxValue", p.MemoryMaxValue)
	positive("BucketGrowth", p.BucketGrowth)
	if p.Epsilon <= 0 || p.Epsilon >= 1 {
		bad("Epsilon", "in (0, 1)", p.Epsilon)
	}
	if len(errs) == 0 {
		if n := bucketCount(p.CPUMaxValue, p.CPUFirstBucket, 1+p.BucketGrowth); n > maxBuckets {
			bad("BucketGrowth", fmt.Sprintf("large enough that CPU needs at most %d buckets (it needs %d)", maxBuckets, n), p.BucketGrowth)
		}
		if n := bucketCount(p.MemoryMaxValue, p.MemoryFirstBucket, 1+p.BucketGrowth); n > maxBuckets {
			bad("BucketGrowth", fmt.Sprintf("large enough that memory needs at most %d buckets (it needs %d)", maxBuckets, n), p.BucketGrowth)
		}
	}
	duration("CPUHalfLife", p.CPUHalfLife)
	duration("MemoryHalfLife", p.MemoryHalfLife)
	duration("MemoryInterval", p.MemoryInterval)
	if p.MemoryIntervals < 1 || p.MemoryIntervals > 255 {
		bad("MemoryIntervals", "in [1, 255]", p.MemoryIntervals)
	}
	fraction("CPUPercentile", p.CPUPercentile)
	fraction("MemoryPercentile", p.MemoryPercentile)
	fraction("LowerPercentile", p.LowerPercentile)
	fraction("UpperPercentile", p.UpperPercentile)
	if !(p.SafetyMargin >= 0 && p.SafetyMargin <= 10) {
		bad("SafetyMargin", "in [0, 10]", p.SafetyMargin)
	}
	duration("ConfidenceInterval", p.ConfidenceInterval)
	if p.MinCPUMilli < 0 {
		bad("MinCPUMilli", ">= 0", p.MinCPUMilli)
	}
	if p.MinMemoryBytes < 0 {
		bad("MinMemoryBytes", ">= 0", p.MinMemoryBytes)
	}
	if p.MinHistory < 0 {
		bad("MinHistory", ">= 0", p.MinHistory)
	}
	if !(p.MinChange >= 0 && p.MinChange < 1) {
		bad("MinChange", "in [0, 1)", p.MinChange)
	}
	fraction("ThrottlingRatio", p.ThrottlingRatio)
	if p.OOMBumpBytes < 0 {
		bad("OOMBumpBytes", ">= 0", p.OOMBumpBytes)
	}
	if !(p.OOMBumpRatio >= 1) || math.IsInf(p.OOMBumpRatio, 0) {
		bad("OOMBumpRatio", "a finite number >= 1", p.OOMBumpRatio)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("validate recommender params: %w", err)
	}
	return nil
}
