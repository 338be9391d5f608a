// Package pages is the leader's source of the web pages' workload views
// (web.WorkloadSource) and of the Savings page (web.SavingsSource).
//
// It reads the RightsizingRecommendations, their workloads, pods and
// policies through the leader's cache, and the agents' readings from
// cluster/signals. It keeps each recommended workload container's usage
// series for the last 6 h in memory (UsageSeries) and builds a
// workload's page from them (WorkloadViews). Savings sums the
// recommendations with cluster/savings. It writes nothing to the
// apiserver.
package pages
