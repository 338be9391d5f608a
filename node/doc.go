// Package node is kerf-agent, Kerf's node agent: it discovers the pods of its
// node, samples each container's cpu.stat, runs the OOM sources, exports
// Prometheus metrics and streams counters and OOM kills to the leader
// (docs/design.md section 5).
package node
