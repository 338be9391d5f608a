// Package cluster is one kerf-leader replica: its configuration, its
// clients, its election and its servers (docs/leader.md).
//
// config.go holds Config, clients.go the election and the clients that
// write, leader.go builds the replica (New) and runs it (Run), servers.go
// serves the endpoints, the webhook and the agents' stream, and
// leaderpod.go labels the leading replica's pod.
//
// Every part the replica runs is a package below it: cluster/rightsizing
// (the RightsizingRecommendation controller), cluster/recommender,
// cluster/pages, cluster/cachestore, cluster/fence, cluster/stream and
// more. docs/development.md, "Layout", lists them all.
package cluster
