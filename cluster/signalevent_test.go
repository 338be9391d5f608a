package cluster

import (
	goruntime "runtime"
	"testing"

	"github.com/stretchr/testify/assert"
	"k8s.io/apimachinery/pkg/types"
)

// TestSignalEventsAreSmall: the event a signal puts on the reconciler's
// channels carries the pod's UID in a small object (a whole corev1.Pod
// took 1,280 bytes of heap an event; up to 8,192 wait in the channels),
// and m.signaled reads the UID from it.
func TestSignalEventsAreSmall(t *testing.T) {
	const n = 10000
	events := make([]any, n)
	var before, after goruntime.MemStats
	goruntime.GC()
	goruntime.ReadMemStats(&before)
	for i := range events {
		events[i] = signalEvent(types.UID("6f1c2b3a-9d4e-4f5a-8b7c-000000000001")).Object
	}
	goruntime.GC()
	goruntime.ReadMemStats(&after)
	per := float64(after.HeapAlloc-before.HeapAlloc) / n
	t.Logf("%.0f bytes of live heap a queued signal event", per)
	assert.Less(t, per, 400.0, "a signal event holds a small object")
	assert.Equal(t, types.UID("6f1c2b3a-9d4e-4f5a-8b7c-000000000001"), signalEvent("6f1c2b3a-9d4e-4f5a-8b7c-000000000001").Object.GetUID())
	goruntime.KeepAlive(events)
}
