// Package leadertest runs kerf-leader for tests, on the shared control
// plane (test/controlplane): a whole replica, or the stream's end alone.
//
// replica.go starts whole replicas (StartReplica, Pair, StartCrashing)
// and what needs one (WatchedWeb, InPlaceWeb, RecommendedWeb). The tests
// of cluster, cluster/rightsizing, cluster/recommender and cluster/pages
// use it, with test/kubetest for the objects.
//
// stream.go serves the leader's side of the agents' stream alone (Start):
// the real stream server (TLS, TokenReview of the agent's bound token
// against a real apiserver, pods from a controller-runtime cache read as
// the leader reads its own: stream.CachedPods) on a loopback port,
// feeding a signals.Kernel. On request it also signs the agents' /metrics
// certificates (--metrics-tls) with a self-managed CA kept in a Secret of
// the agents' namespace, as the leader does. The agent's tests use it.
package leadertest
