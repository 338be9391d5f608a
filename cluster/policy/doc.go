// Package policy is the leader's pure decision logic around policies: which
// RightsizingPolicy or ClusterRightsizingPolicy governs a workload, the
// fingerprints that identify a policy and a set of values, the guardrails
// that may block an apply (pause, freeze windows, cooldowns, values already
// rolled back), and the rollback backoff state machine (docs/design.md
// sections 2 and 4).
//
// Nothing here talks to the apiserver or reads the clock: callers pass the
// objects they listed and the time they decide at, so every rule is tested
// exactly at its edges.
package policy
