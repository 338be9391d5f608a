// Package recommend is the pure core of Kerf's recommender (issue 13,
// docs/recommender.md).
//
//   - ContainerState holds decaying usage histograms per workload and
//     container.
//   - Estimate turns them into requests and limits.
//   - Recommend puts the estimate through the guards and Kerf's latches,
//     which refuse decreases for throttled, OOM-killed, cooling-down or
//     failedPermanent resources; RecommendExternal does so for targets
//     given from outside.
//   - AppendCheckpoint and LoadCheckpoint write and read a compact
//     checkpoint of a container's state.
//
// It does no I/O, starts no goroutines and takes no locks. Every function
// is given the time it should use, so a caller owns storage, concurrency
// and the clock. The model follows the Vertical Pod Autoscaler's
// recommender (vertical-pod-autoscaler/pkg/recommender);
// docs/recommender.md says which of its choices were kept and why.
package recommend
