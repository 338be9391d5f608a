package stream

import (
	"sync"

	"github.com/kerf-dev/kerf/cluster/healthwatch"
	"github.com/kerf-dev/kerf/cluster/signals"
)

// counterScratch holds the slices one counters message is read into.
// None is kept past the message: the stores copy what they keep, and
// nodeContainers only reads. So they are pooled rather than made anew for
// every node's message every interval; what that saved is in
// docs/performance.md, "The eighth round".
type counterScratch struct {
	samples []healthwatch.CounterSample
	usage   []signals.UsageSample
	listed  []instanceKey
}

// maxPooledScratch bounds the containers a pooled counterScratch holds
// room for: a larger one (a node of many containers) is left to the GC.
const maxPooledScratch = 1024

var counterScratches = sync.Pool{New: func() any { return new(counterScratch) }}

// put returns sc to the pool, its slices cleared (they hold strings) or,
// past maxPooledScratch, dropped.
func (sc *counterScratch) put() {
	if max(cap(sc.samples), cap(sc.usage), cap(sc.listed)) > maxPooledScratch {
		return
	}
	clear(sc.samples)
	clear(sc.usage)
	clear(sc.listed)
	counterScratches.Put(sc)
}
