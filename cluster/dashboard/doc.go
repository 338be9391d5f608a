// Package dashboard is kubectl kerf dashboard's local server: the
// leader's web pages, served on the user's machine from the user's own
// kubeconfig.
//
// The pages are package web's Activity and workload pages.
//
// It reads RightsizingRecommendations, their workloads, the namespaces and
// the policies with the user's client, through the same sources as the
// leader (cluster/audit's Handler, cluster/pages' WorkloadViews), so the
// apiserver's RBAC is the only access control: a refused read is a 403
// page, or a part of a page left out and named. It writes nothing.
//
// It keeps no usage: the usage series live in the leader's memory, and
// the leader's pages want a bearer token that the apiserver's service
// proxy does not pass on. The workload pages say so.
//
// The server listens on a loopback address only, under a random path
// token made for the run, and answers only requests whose Host is that
// loopback address (server.go says why).
package dashboard
