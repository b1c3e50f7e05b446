//go:build race

package storetest

// raceEnabled: the race detector slows a pure-Go SQLite about thirtyfold;
// the property tests then run fewer cases (the detector is about
// concurrency, which the concurrent subtests cover in full).
const raceEnabled = true
