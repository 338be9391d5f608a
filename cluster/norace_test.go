//go:build !race

package cluster

// raceEnabled is whether the tests run under the race detector.
const raceEnabled = false
