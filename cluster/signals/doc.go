// Package signals keeps what the node agents report over their stream
// (docs/design.md sections 3, 5 and 6) for the health watch: Kernel holds
// the OOM kills and CFS counter samples (a compacting time series), and
// AgentStatuses the container restarts and terminations the agents saw in
// the kubelet's Pods API; Usage keeps the containers' newest usage
// readings (CPU, working set, memory peak) for the recommender. The first
// two implement cluster/healthwatch's source
// interfaces, and both tell subscribers which pod a new signal is about
// (Subscribe), so the leader evaluates that pod's watch at once. Stores
// bundles the three as the leader's one set of stores.
//
// The rules that read the stores are in cluster/healthwatch, which imports
// nothing from here.
package signals
