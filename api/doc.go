// Package api holds the types other parts depend on: the CRD types in
// api/v1alpha1, the agent-to-leader stream protocol in api/stream/v1
// (docs/design.md sections 2 and 6), the audit API's JSON in api/audit/v1
// (the leader's and the hub's) and the hub's write protocol and answers in
// api/hub/v1 (section 7b).
package api
