// Package recommender is the leader's recommender loop: it turns the
// agents' usage readings into RightsizingRecommendations for the
// workloads whose policy enables spec.recommend (docs/recommender.md).
//
//   - Loop runs a pass every Config.Period, on the elected leader only,
//     as named steps, each timed (kerf_recommender_pass_seconds).
//   - ingest.go feeds each container's readings and OOM kills into its
//     state; models.go gives each workload its policy's model.
//   - recommended.go makes the recommendations, vpa.go takes a VPA's
//     targets when the policy says source VPA.
//   - checkpoint.go keeps the states in RightsizingCheckpoints across
//     failovers.
//
// The model itself, pure, is cluster/recommend.
//
// It reads the policies, pods, workloads and recommendations through the
// leader's client, VerticalPodAutoscalers and its checkpoints from the
// apiserver, and the usage and kernel stores of cluster/signals. It
// writes RightsizingRecommendations (spec and the basis annotation) and
// RightsizingCheckpoints.
package recommender
