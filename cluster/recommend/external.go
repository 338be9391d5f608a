package recommend

// External is a container's targets given from outside the model, such as
// the target of a VerticalPodAutoscaler that only recommends (updateMode
// Off). RecommendExternal takes them instead of the estimators' and puts
// them through the same guards and latches.
type External struct {
	// Target is the CPU and memory target; a resource left at zero has no
	// target and keeps its current values.
	Target Resources
	// Lower and Upper are the source's bounds. They are recorded as
	// figures only and drive nothing, as the model's own bounds.
	Lower, Upper Resources
}

// RecommendExternal makes the recommendation for one container from
// targets given from outside, ext, instead of the estimators.
//   - The bounds, the minimum-change and upscale-only guards, the latches
//     and the limits apply as in Recommend.
//   - The latches read s's signals, the OOM kills and throttling the
//     caller recorded, combined with in.Signals. s may be nil, and then
//     only in.Signals count.
//   - MinHistory does not apply: the source decides when it has a target.
//   - The result is Ready when ext has a target for CPU or memory. Its
//     Estimate is ext's figures, with no history.
func (m *Model) RecommendExternal(s *ContainerState, ext External, in Input) Result {
	r := Result{Request: in.Request, Limit: in.Limit}
	r.Estimate = Estimate{Target: ext.Target, Lower: ext.Lower, Upper: ext.Upper}
	cpu, mem := ext.Target.CPUMilli > 0, ext.Target.MemoryBytes > 0
	if !cpu && !mem {
		return r
	}
	r.Ready = true
	sig := in.Signals
	if s != nil {
		sig = s.Signals(m, in.Now).combine(in.Signals)
	}
	m.guard(&r, sig, in, cpu, mem)
	return r
}
