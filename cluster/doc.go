// Package cluster is one kerf-leader replica: its configuration, its
// clients, its election and its servers (docs/leader.md).
//
// config.go holds Config; leader.go builds the replica (New) and runs it
// (Run); servers.go serves the endpoints, the webhook and the agents'
// stream; leaderpod.go labels the leading replica's pod. Every part the
// replica runs is a package below it, among them:
//   - cluster/rightsizing: the RightsizingRecommendation controller,
//     which applies, watches and rolls back (a file per step).
//   - cluster/cachestore: the leader's cache, what it keeps of each
//     object, its field indexes and views.
//   - cluster/fence: write fencing, the rollbacks' client budget and the
//     applies' gate.
//   - cluster/pages: the workload pages' views and usage series.
//   - cluster/recommender: the recommender's loop, its VPA source and
//     its checkpoints.
//
// docs/development.md, "Layout", lists them all.
package cluster
