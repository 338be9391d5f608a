// Package cluster is kerf-leader, Kerf's cluster-level leader: policy
// resolution, the applier, the health watch, rollback, the backoff state
// machine, the stream server and the audit API (docs/design.md sections 2-4).
package cluster
