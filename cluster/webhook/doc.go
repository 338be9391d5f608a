// Package webhook is Kerf's mutating admission webhook for pods
// (docs/design.md sections 2 and 4). Every kerf-leader replica serves it,
// not only the elected one: when a pod of a workload is created, the webhook
// gives it the values Kerf applied to that workload, so a pod that replaces
// an in-place-resized one (strategy InPlace) or that is created after a
// Deferred change starts with the applied values. Once a change is rolled
// back the webhook stops giving its values to new pods.
//
// The webhook fails open: the configuration uses failurePolicy Ignore and a
// short timeout, and the handler allows a pod unchanged on any internal
// error. A pod is never made invalid by an injection: a container whose
// limit would fall below its request is left as it is.
//
// Its TLS certificate comes from package cert (a user's directory, or a
// self-managed certificate whose CA goes into the configuration's
// caBundle).
package webhook
