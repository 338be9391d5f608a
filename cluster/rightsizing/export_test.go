package rightsizing

// What the external tests (package rightsizing_test) read of the
// package's internals.

// PendingRequeue is pendingRequeue.
const PendingRequeue = pendingRequeue

// MaxEventNote is maxEventNote.
const MaxEventNote = maxEventNote

// The outcome labels of kerf_status_writes_invalid_total.
const (
	InvalidFallback = invalidFallback
	InvalidRefused  = invalidRefused
)

// LoosenActionMessageLimit lets action messages grow to n bytes, so
// that the apiserver refuses a status write, until the returned func
// restores the limit.
func LoosenActionMessageLimit(n int) (restore func()) {
	saved := statusLimits
	statusLimits.actionMessage = n
	return func() { statusLimits = saved }
}
