package recommend

import (
	"fmt"
	"math"
	"time"
)

// Resource names a resource, as Kubernetes spells it.
type Resource string

// The resources the recommender sizes.
const (
	CPU    Resource = "cpu"
	Memory Resource = "memory"
)

// Field is the part of a container's resources a refusal is about.
type Field string

// The fields a refusal can hold.
const (
	Request Field = "request"
	Limit   Field = "limit"
)

// Reason says why a value was held back.
type Reason string

// The reasons. The first four are Kerf's latches (issue 13); the others are
// guards.
const (
	// ReasonOOMKill: an OOM kill in the window; memory never goes below its
	// current value and the request is at least max(peak+100Mi, peak×1.2).
	ReasonOOMKill Reason = "OOMKill"
	// ReasonThrottled: the throttling ratio reached the policy's
	// throttlingRatio in the window; CPU never goes down.
	ReasonThrottled Reason = "Throttled"
	// ReasonCooldown: the resource is in its post-rollback cooldown.
	ReasonCooldown Reason = "Cooldown"
	// ReasonFailedPermanent: the resource's values reached failedPermanent.
	ReasonFailedPermanent Reason = "FailedPermanent"
	// ReasonUpscaleOnly: the policy lets this resource only go up.
	ReasonUpscaleOnly Reason = "UpscaleOnly"
	// ReasonMinChange: the change is smaller than MinChange of the current value.
	ReasonMinChange Reason = "MinChange"
	// ReasonWatchRunning: the workload's last change is still watched.
	// Nothing new is asked for until the watch ends, healthy or rolled
	// back. The caller, which knows the watch, records these.
	ReasonWatchRunning Reason = "WatchRunning"
	// ReasonDegraded: the workload is Degraded, too many of its last
	// changes were rolled back. Nothing new is asked for until it is
	// resumed; the caller, which reads its status, records these.
	ReasonDegraded Reason = "Degraded"
)

// Refusal is one value the recommender did not recommend, with its
// figures. A caller records it to say why Kerf did not shrink or change
// something.
type Refusal struct {
	// Resource is cpu or memory.
	Resource Resource
	// Field is request or limit.
	Field Field
	// Asked is what the estimator (after bounds) asked for: millicores or bytes.
	Asked int64
	// Held is what is recommended instead: the field's final value.
	Held int64
	// Reason is why.
	Reason Reason
	// Observed is the figure behind the reason: the throttling ratio, the
	// OOM peak in bytes, or the current value for the other reasons.
	Observed float64
	// Threshold is what Observed was held against: the policy's
	// throttlingRatio, the OOM floor in bytes, or the MinChange fraction.
	Threshold float64
	// At is when the OOM kill happened, for ReasonOOMKill.
	At time.Time
}

// String renders the refusal for an Event or a log message.
func (r Refusal) String() string {
	s := fmt.Sprintf("%s %s held at %s instead of %s: %s", r.Resource, r.Field, r.amount(float64(r.Held)), r.amount(float64(r.Asked)), r.Reason)
	switch r.Reason {
	case ReasonOOMKill:
		return s + fmt.Sprintf(" at %s (peak %s, floor %s)", r.At.UTC().Format(time.RFC3339), r.amount(r.Observed), r.amount(r.Threshold))
	case ReasonThrottled:
		return s + fmt.Sprintf(" (throttling ratio %.3g >= %.3g)", r.Observed, r.Threshold)
	case ReasonMinChange:
		return s + fmt.Sprintf(" (change under %.3g of %s)", r.Threshold, r.amount(r.Observed))
	case ReasonWatchRunning:
		return s + fmt.Sprintf(" (the change applied at %s is still watched)", r.At.UTC().Format(time.RFC3339))
	case ReasonDegraded:
		return s + fmt.Sprintf(" (the workload is Degraded since %s, until resumed)", r.At.UTC().Format(time.RFC3339))
	}
	return s
}

// amount writes a value of the refusal's resource for people: millicores
// as "250m", bytes as "250Mi" (one decimal when not whole).
func (r Refusal) amount(v float64) string {
	if r.Resource == CPU {
		return fmt.Sprintf("%.0fm", v)
	}
	mi := v / (1 << 20)
	if mi == float64(int64(mi)) {
		return fmt.Sprintf("%.0fMi", mi)
	}
	return fmt.Sprintf("%.1fMi", mi)
}

// Holds are the backoff state's inputs per resource: cooldown after a
// rollback, and failedPermanent.
type Holds struct {
	// CPUCooldown is true while CPU is in its post-rollback cooldown.
	CPUCooldown bool
	// MemoryCooldown is true while memory is in its post-rollback cooldown.
	MemoryCooldown bool
	// CPUFailedPermanent is true once CPU's values reached failedPermanent.
	CPUFailedPermanent bool
	// MemoryFailedPermanent is true once memory's values reached failedPermanent.
	MemoryFailedPermanent bool
}

// Input is what a recommendation is made against: the container's current
// values, its bounds, and the latch inputs.
type Input struct {
	// Now is the time of the recommendation.
	Now time.Time
	// Request and Limit are the container's current values; zero is unset.
	Request, Limit Resources
	// MinAllowed and MaxAllowed bound the request; zero is no bound.
	MinAllowed, MaxAllowed Resources
	// Containers is the count of containers in the pod, which share the pod
	// minimum; 0 counts as 1.
	Containers int
	// Signals are OOM and throttling inputs the state does not hold (an
	// OOM kill seen in pod status, say); Recommend combines them with the
	// state's own Signals(Now), so a caller cannot forget the latter.
	Signals Signals
	// Holds are the cooldown and failedPermanent inputs.
	Holds Holds
	// Guaranteed is true when the pod's QoS class is Guaranteed. Its
	// limits then follow its requests whatever KeepLimitProportion says:
	// the apiserver refuses an in-place resize that changes the class.
	Guaranteed bool
	// ManifestRequest and ManifestLimit are the workload's own values,
	// its pod template's; zero is unknown. An OOM kill under a memory
	// limit below the manifest's restores at least the manifest's memory.
	ManifestRequest, ManifestLimit Resources
}

// Result is a recommendation for one container.
type Result struct {
	// Ready is false while the history is shorter than MinHistory; then
	// Request and Limit are the current values.
	Ready bool
	// Request and Limit are the recommended values; a resource with no data
	// keeps its current values.
	Request, Limit Resources
	// Changed is true when Request or Limit differs from the current values.
	Changed bool
	// Estimate is the figures the recommendation was made from.
	Estimate Estimate
	// Refusals are the values held back, latches first; nil when none.
	Refusals []Refusal
}

// Recommend makes the recommendation for one container from its state and
// input. In order:
//   - the estimate;
//   - the bounds;
//   - the minimum-change and upscale-only guards;
//   - the latches, which win over everything but never raise a value
//     above MaxAllowed except to keep the current one;
//   - the limits.
func (m *Model) Recommend(s *ContainerState, in Input) Result {
	r := Result{Request: in.Request, Limit: in.Limit}
	r.Estimate = m.Estimate(s, in.Containers)
	if s.samples == 0 || r.Estimate.History < m.p.MinHistory {
		return r
	}
	r.Ready = true
	m.guard(&r, s.Signals(m, in.Now).combine(in.Signals), in, !s.CPU.Empty(), !s.Memory.Empty())
	return r
}

// guard turns r.Estimate.Target into r's values through the guards and the
// latches, for CPU and for memory when each has a target.
func (m *Model) guard(r *Result, sig Signals, in Input, cpu, mem bool) {
	if cpu {
		var l latch
		if sig.ThrottlingRatio >= m.p.ThrottlingRatio {
			l.hold(ReasonThrottled, in.Request.CPUMilli, in.Limit.CPUMilli, sig.ThrottlingRatio, m.p.ThrottlingRatio, time.Time{})
		}
		l.holds(in.Holds.CPUCooldown, in.Holds.CPUFailedPermanent, m.p.UpscaleOnlyCPU, in.Request.CPUMilli, in.Limit.CPUMilli)
		r.Request.CPUMilli, r.Limit.CPUMilli = m.decide(&r.Refusals, CPU, r.Estimate.Target.CPUMilli,
			in.Request.CPUMilli, in.Limit.CPUMilli, in.MinAllowed.CPUMilli, in.MaxAllowed.CPUMilli, in.Guaranteed, &l)
	}
	if mem {
		var l latch
		if !sig.OOMAt.IsZero() {
			// The bump with the safety margin, as VPA's estimator adds
			// the margin to its OOM sample (the replay against VPA,
			// docs/performance.md, measured the bump without it), in
			// whole mebibytes as the recommender writes memory: a floor
			// below the value written would hold at a new value each pass.
			peak := sig.OOMPeakBytes
			bump := ceil(math.Max(peak+float64(m.p.OOMBumpBytes), peak*m.p.OOMBumpRatio) * (1 + m.p.SafetyMargin))
			bump = (bump + Mi - 1) / Mi * Mi
			lim := in.Limit.MemoryBytes
			// A kill under a memory limit lowered below the manifest's
			// goes back to at least the manifest's values, which ran
			// without it: a bump from the killed value may be killed
			// again, and each kill of a step costs a restart.
			if ml := in.ManifestLimit.MemoryBytes; ml > 0 && peak < float64(ml) {
				bump, lim = max(bump, in.ManifestRequest.MemoryBytes), max(lim, ml)
			}
			if maxm := in.MaxAllowed.MemoryBytes; maxm > 0 {
				bump = min(bump, maxm)
			}
			if in.Guaranteed {
				lim = max(in.Limit.MemoryBytes, bump) // the limit stays equal to the request
			}
			l.hold(ReasonOOMKill, max(in.Request.MemoryBytes, bump), lim, peak, float64(bump), sig.OOMAt)
		}
		l.holds(in.Holds.MemoryCooldown, in.Holds.MemoryFailedPermanent, m.p.UpscaleOnlyMemory, in.Request.MemoryBytes, in.Limit.MemoryBytes)
		r.Request.MemoryBytes, r.Limit.MemoryBytes = m.decide(&r.Refusals, Memory, r.Estimate.Target.MemoryBytes,
			in.Request.MemoryBytes, in.Limit.MemoryBytes, in.MinAllowed.MemoryBytes, in.MaxAllowed.MemoryBytes, in.Guaranteed, &l)
	}
	r.Changed = r.Request != in.Request || r.Limit != in.Limit
}

// maxFloors is how many reasons can hold one resource at once.
const maxFloors = 4

// floor is one reason's lower limit on a request and a limit.
type floor struct {
	reason              Reason
	request, limit      int64
	observed, threshold float64
	at                  time.Time
}

// latch collects the floors that apply to one resource, without allocating.
type latch struct {
	floors [maxFloors]floor
	n      int
}

func (l *latch) hold(reason Reason, request, limit int64, observed, threshold float64, at time.Time) {
	l.floors[l.n] = floor{reason: reason, request: request, limit: limit, observed: observed, threshold: threshold, at: at}
	l.n++
}

// holds adds the floors that keep the current values: cooldown,
// failedPermanent and upscale-only.
func (l *latch) holds(cooldown, failed, upscaleOnly bool, request, limit int64) {
	if cooldown {
		l.hold(ReasonCooldown, request, limit, float64(request), 0, time.Time{})
	}
	if failed {
		l.hold(ReasonFailedPermanent, request, limit, float64(request), 0, time.Time{})
	}
	if upscaleOnly {
		l.hold(ReasonUpscaleOnly, request, limit, float64(request), 0, time.Time{})
	}
}

// decide turns one resource's target into its request and limit. The
// limit of a Guaranteed pod follows its request, so the class stays.
func (m *Model) decide(refusals *[]Refusal, res Resource, target, curReq, curLim, minAllowed, maxAllowed int64, guaranteed bool, l *latch) (int64, int64) {
	req := target
	if maxAllowed > 0 && req > maxAllowed {
		req = maxAllowed
	}
	if minAllowed > 0 && req < minAllowed {
		req = minAllowed
	}
	// Minimum change: a small move keeps the current value (≥ MinChange moves).
	if curReq > 0 && req != curReq {
		d := math.Abs(float64(req - curReq))
		if d < m.p.MinChange*float64(curReq)*(1-1e-12) {
			*refusals = append(*refusals, Refusal{Resource: res, Field: Request, Asked: req, Held: curReq,
				Reason: ReasonMinChange, Observed: float64(curReq), Threshold: m.p.MinChange})
			req = curReq
		}
	}
	// Latches and holds: each floor above the asked value is a refusal,
	// and the request is the highest floor.
	asked := req
	first := len(*refusals)
	for i := 0; i < l.n; i++ {
		if f := &l.floors[i]; f.request > asked {
			*refusals = append(*refusals, Refusal{Resource: res, Field: Request, Asked: asked,
				Reason: f.reason, Observed: f.observed, Threshold: f.threshold, At: f.at})
			req = max(req, f.request)
		}
	}
	// Limits: as they are (the default), or in proportion to the request
	// (KeepLimitProportion, and always in a Guaranteed pod); never below
	// a floor or the request. A floor above the limit the asked request
	// implied is a refusal too.
	lim := curLim
	if curLim > 0 {
		proportion := m.p.KeepLimitProportion || guaranteed
		limitFor := func(request int64) int64 {
			if proportion && curReq > 0 && request != curReq {
				return ceil(float64(request) * float64(curLim) / float64(curReq))
			}
			return curLim
		}
		askedLim := limitFor(asked)
		lim = limitFor(req)
		for i := 0; i < l.n; i++ {
			if f := &l.floors[i]; f.limit > askedLim {
				*refusals = append(*refusals, Refusal{Resource: res, Field: Limit, Asked: askedLim,
					Reason: f.reason, Observed: f.observed, Threshold: f.threshold, At: f.at})
				lim = max(lim, f.limit)
			}
		}
		lim = max(lim, req)
	}
	// What was held is the final value of the field.
	for i := first; i < len(*refusals); i++ {
		if r := &(*refusals)[i]; r.Field == Request {
			r.Held = req
		} else {
			r.Held = lim
		}
	}
	return req, lim
}

// combine is the more restrictive of two signal sets: the later OOM kill
// with the higher peak, and the higher throttling ratio.
func (a Signals) combine(b Signals) Signals {
	if b.OOMAt.After(a.OOMAt) {
		a.OOMAt = b.OOMAt
	}
	a.OOMPeakBytes = max(a.OOMPeakBytes, b.OOMPeakBytes)
	a.ThrottlingRatio = max(a.ThrottlingRatio, b.ThrottlingRatio)
	return a
}
