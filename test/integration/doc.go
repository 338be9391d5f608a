// Package integration is Kerf's integration suite: the whole chain with
// every part real. Pods live on a real apiserver or kubelet, containers are
// real cgroups, the agent runs as kerf-agent wires it, the leader's stream
// receives it, and a real Prometheus scrapes the agent (docs/design.md
// sections 3, 5, 6 and 9). The end-to-end tests on the sandbox cluster with
// Kerf installed from manifests/ are test/e2e's.
package integration
