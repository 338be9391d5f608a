// Package policy is the leader's decision logic around policies: which
// RightsizingPolicy or ClusterRightsizingPolicy governs a workload, the
// fingerprints that identify a policy and a set of values, the guardrails
// that may block an apply (pause, freeze windows, cooldowns, values already
// rolled back), and the rollback backoff state machine (docs/design.md
// sections 2 and 4).
//
// The rules read no apiserver and no clock: callers pass the objects and
// the time they decide at, so every rule is tested exactly at its edges.
// Gatherer is the one reader: it reads a namespace's labels and the
// policies, through the leader's cache, for Resolve.
package policy
