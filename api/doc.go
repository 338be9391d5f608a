// Package api holds the types other parts depend on: the CRD types in
// api/v1alpha1 and the agent-to-leader stream protocol in api/stream/v1
// (docs/design.md sections 2 and 6).
package api
