// Package rightsizing is the RightsizingRecommendation controller: it
// applies a recommendation's change, watches it, and rolls it back on
// the first sign of harm.
//
// A recommendation's life, a file per step:
//   - setup.go: the controller's watches, field indexes and queues;
//     handlers.go maps pod updates and the agents' signals to requests
//     (harm first), mapper.go finds the recommendation a pod concerns.
//   - paths.go: the two paths that run passes, the apply path and the
//     rollback path with workers of its own, and the lock per
//     recommendation they share.
//   - reconciler.go and context.go: one pass, what it reads once and
//     which step it runs next.
//   - plan.go: guardrails, the plan, the gates (cluster/gates), the
//     apply, a blocked change.
//   - watch.go: the health watch after an apply and its verdicts.
//   - canary.go: a canary's pods, its watch on them alone, its
//     promotion to every pod (spec.guardrails.canary).
//   - rollback.go: the breach, the restore and a failed restore.
//   - backoff.go: when rolled-back values may try again.
//   - degraded.go: a workload whose last changes keep being rolled
//     back, marked Degraded and left alone until resumed.
//   - record.go: each transition written once (status, history, Event,
//     metric) and the workload's mirror of the rollback state.
//   - refusals.go: the values the recommender held back, recorded.
//   - fit.go: every status field cut to the CRD's limits.
//   - metrics.go: the controller's metrics.
//
// The rollback path, from a harm signal to the restored values:
// handlers.go (harm first) → paths.go (the rollback path) → watch.go
// (the verdict) → rollback.go (breach, restore) → record.go. It uses
// cluster/fence for the rollbacks' own client and cluster/policy for the
// backoff. docs/leader.md and docs/health.md describe it.
package rightsizing
