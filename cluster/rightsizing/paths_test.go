package rightsizing

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/types"
)

// TestTheKeyLockIsExclusiveAndBounded: passes of one key run one at a
// time, of different keys side by side; an entry is removed once no pass
// holds or waits for it, and a wait ends with its context.
func TestTheKeyLockIsExclusiveAndBounded(t *testing.T) {
	l := newKeyLock()
	ctx := context.Background()
	a, b := types.NamespacedName{Namespace: "ns", Name: "a"}, types.NamespacedName{Namespace: "ns", Name: "b"}
	var in atomic.Int64
	var most atomic.Int64
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			if !assert.NoError(t, l.lock(ctx, a)) {
				return
			}
			n := in.Add(1)
			for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
			}
			time.Sleep(time.Millisecond)
			in.Add(-1)
			l.unlock(a)
		})
	}
	require.NoError(t, l.lock(ctx, b), "another key is not held by a's passes")
	l.unlock(b)
	wg.Wait()
	assert.Equal(t, int64(1), most.Load(), "passes of one key ran at once")
	assert.Equal(t, 0, l.len(), "entries left once unlocked")

	require.NoError(t, l.lock(ctx, a))
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	require.ErrorIs(t, l.lock(short, a), context.DeadlineExceeded)
	assert.Equal(t, 1, l.len())
	l.unlock(a)
	assert.Equal(t, 0, l.len(), "entries left once unlocked")
}
