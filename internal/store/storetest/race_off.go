//go:build !race

package storetest

// raceEnabled reports whether the race detector is on (see race_on.go).
const raceEnabled = false
