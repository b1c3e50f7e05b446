//go:build !race

package sender_test

// propertyRuns bounds the store-backed cases of the property test.
const propertyRuns = 100

// raceEnabled reports whether the race detector is on.
const raceEnabled = false
