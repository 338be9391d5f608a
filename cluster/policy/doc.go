// Package policy is the leader's decision logic around policies
// (docs/design.md sections 2 and 4). It decides:
//   - which RightsizingPolicy or ClusterRightsizingPolicy governs a
//     workload, or the backoff design's RollbackPolicy or
//     ClusterRollbackPolicy, turned into the same PolicySpec
//     (Resolve, FromRollbackPolicy);
//   - the fingerprints that identify a policy and a set of values
//     (Fingerprint, ValueFingerprint);
//   - the guardrails that may block an apply: pause, freeze windows,
//     cooldowns, values already rolled back (CheckApply);
//   - whether a change's watch has judged it yet (Unjudged): until then
//     no new change replaces it;
//   - the rollback backoff state machine (StartMonitoring and the
//     transitions after it).
//
// The rules read no apiserver and no clock: callers pass the objects and
// the time they decide at, so every rule is tested exactly at its edges.
// Gatherer is the one reader: it reads a namespace's labels and the
// policies of the four kinds, through the leader's cache, for Resolve.
package policy
