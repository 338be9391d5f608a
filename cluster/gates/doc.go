// Package gates holds the checks a planned change must pass before Kerf
// applies it. They refuse what would fail, or harm, before any pod runs
// it (docs/health.md, "Before a change: the gates").
//
// Each gate is a Gate; a Checker runs them in order and the first that
// refuses wins. The reconciler (cluster/rightsizing) records a refusal as
// phase Blocked with the gate's name as the reason, and tries again when
// the object that refused changes.
//
// The gates read the change's workload (its status), its pods' specs and
// the namespace's LimitRanges, through the leader's cache; they write
// nothing. A file per gate: protected.go, rollout.go, qos.go,
// limitrange.go.
package gates
