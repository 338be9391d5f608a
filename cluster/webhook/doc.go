// Package webhook is Kerf's mutating admission webhook for pods
// (docs/design.md sections 2 and 4, docs/leader.md "The webhook").
//
// Every kerf-leader replica serves it, not only the elected one. When a
// pod of a workload is created, the webhook gives it the values Kerf
// applied to that workload. So a pod that replaces an in-place-resized
// one (strategy InPlace), or one created after a Deferred change, starts
// with the applied values. Once a change is rolled back the webhook stops
// giving its values to new pods.
//
//   - Injector answers the AdmissionReviews (Path).
//   - Configuration is the MutatingWebhookConfiguration that sends them.
//   - ClientAuth authenticates the apiserver by its client certificate.
//   - ServeListenerWithin serves the webhook and /healthz within limits.
//
// It reads ReplicaSets and RightsizingRecommendations. It writes nothing
// to the cluster: its answer carries a JSONPatch, and it counts its
// results in metrics.
//
// The webhook fails open: the configuration uses failurePolicy Ignore and
// a short timeout, and the handler allows a pod unchanged on any internal
// error. An injection never makes a pod invalid: a container whose limit
// would fall below its request is left as it is.
//
// Its TLS certificate comes from package cert: a user's directory, or a
// self-managed certificate whose CA goes into the configuration's
// caBundle.
package webhook
