//go:build !race

package rightsizing

// raceEnabled is whether the tests run under the race detector.
const raceEnabled = false
