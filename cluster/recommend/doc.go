// Package recommend is the pure core of Kerf's recommender: decaying usage
// histograms per workload and container, the estimators that turn them into
// requests and limits, the Kerf latches that refuse decreases for throttled,
// OOM-killed, cooling-down or failedPermanent resources, the guards, and a
// compact checkpoint of a container's state (issue 13, docs/recommender.md).
//
// It does no I/O, starts no goroutines and takes no locks: every function is
// given the time it should use, so a caller owns storage, concurrency and the
// clock. The model follows the Vertical Pod Autoscaler's recommender
// (vertical-pod-autoscaler/pkg/recommender); docs/recommender.md says which of
// its choices were kept and why.
package recommend
