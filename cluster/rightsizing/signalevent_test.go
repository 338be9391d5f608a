package rightsizing

import (
	"context"
	goruntime "runtime"
	"testing"

	"github.com/stretchr/testify/assert"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
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

// TestSignalEventsAreUsedAgain: a signal event's object, once its handler
// has read it (releasing), is given back and taken again for the next
// signal, holding that signal's UID alone: the agents' counters make
// thousands a second at scale.
func TestSignalEventsAreUsedAgain(t *testing.T) {
	var read []types.UID
	mapFn := releasing(func(_ context.Context, o client.Object) []reconcile.Request {
		read = append(read, o.GetUID())
		return nil
	})
	allocs := testing.AllocsPerRun(1000, func() {
		e := signalEvent("6f1c2b3a-9d4e-4f5a-8b7c-000000000001")
		mapFn(context.Background(), e.Object)
	})
	// Under the race detector sync.Pool drops a quarter of what it is
	// given, at random.
	most := 0.0
	if raceEnabled {
		most = 0.5
	}
	assert.LessOrEqual(t, allocs, most, "a signal's event allocates nothing once its object is given back")
	e := signalEvent("u-2")
	assert.Equal(t, types.UID("u-2"), e.Object.GetUID())
	assert.Empty(t, e.Object.GetName(), "an object used again holds its signal's UID alone")
	assert.Equal(t, types.UID("6f1c2b3a-9d4e-4f5a-8b7c-000000000001"), read[0], "the handler read each signal's UID")
}
