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
// TLS comes either from a certificate directory reloaded when its files
// change (FileCertificate) or from a certificate Kerf manages itself, kept in
// a Secret shared by the replicas (EnsureSelfManagedCert,
// SelfManagedCertificate), whose CA goes into the configuration's caBundle
// (PatchCABundle).
package webhook
