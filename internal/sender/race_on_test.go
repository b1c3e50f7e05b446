//go:build race

package sender_test

// propertyRuns bounds the store-backed cases of the property test: the race
// detector slows the pure-Go SQLite about 30×.
const propertyRuns = 15

// raceEnabled: timing assertions (achieved rates) are meaningless under the
// race detector; safety assertions still run.
const raceEnabled = true
