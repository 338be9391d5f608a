// Package gates holds the checks a planned change must pass before Kerf
// applies it. They refuse what would fail, or harm, before any pod runs
// it (docs/health.md, "Before a change: the gates").
//
// Each gate is a Gate; a Checker runs them in order and the first that
// refuses wins. The reconciler (cluster/rightsizing) records a refusal as
// phase Blocked with the gate's name as the reason, and tries again when
// the object that refused changes.
package gates
