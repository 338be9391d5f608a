// Package cluster is kerf-leader, Kerf's cluster-level leader
// (docs/design.md sections 2-4, docs/leader.md).
//
// The root holds one replica: its configuration, clients, election and
// servers (leader.go), and the RightsizingRecommendation reconciler. It
// reads the agents' stream, the workloads, pods, policies and
// recommendations; it writes resizes, pod templates, HPAs, recommendation
// status, Events and the Lease.
//
// Parts with a job of their own are packages below it, among them:
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
