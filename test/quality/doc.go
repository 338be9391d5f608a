// Package quality is make bench-quality: Kerf's changes against VPA's,
// a percentile strategy and the manifest, replayed on the same usage
// traces without a cluster (issue 34, docs/performance.md).
//
// What it reads: generated traces (Library) or recorded ones in the trace
// format (ReadTrace). What it writes: per strategy and trace, the slack,
// OOM kills, throttled periods, changes and rollbacks (Result), a
// Markdown table and an SVG plot of one trace.
//
// The parts:
//   - trace.go, library.go: a trace is one container's usage sample by
//     sample; the library generates nine seeded patterns.
//   - format.go: the trace format (CSV) and its loader.
//   - kernel.go: what a sample does under given values: OOM kills, CFS
//     throttled periods, crash-loop back-off.
//   - kerf.go, vpa.go, percentile.go, manual.go: the strategies.
//   - replay.go: feeds a trace through a strategy, sample by sample.
//   - report.go, plot.go: the table and the SVG.
package quality
