// Package signals keeps in memory what the node agents report over their
// stream (docs/design.md sections 3, 5 and 6).
//
//   - Kernel holds the OOM kills and CFS counter samples, a compacting
//     time series, for the health watch.
//   - AgentStatuses holds the container restarts and terminations the
//     agents saw in the kubelet's Pods API, for the health watch.
//   - Usage keeps the containers' newest usage readings (CPU, working
//     set, memory peak) for the recommender.
//   - Stores bundles the three as the leader's one set of stores.
//
// Kernel and AgentStatuses implement cluster/healthwatch's source
// interfaces. Both tell subscribers which pod a new signal is about
// (Subscribe), so the leader evaluates that pod's watch at once.
//
// The stream's ingest writes the stores; the health watch and the
// recommender read them. The package reads and writes nothing else. The
// rules that read the stores are in cluster/healthwatch, which imports
// nothing from here.
package signals
