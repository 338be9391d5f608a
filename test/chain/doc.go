// Package chain holds the tests of Kerf's whole chain with every part real:
// pods on a real apiserver or kubelet, containers as real cgroups, the agent
// as kerf-agent wires it, the leader's stream, and a real Prometheus
// scraping the agent (docs/design.md sections 3, 5, 6 and 9).
package chain
