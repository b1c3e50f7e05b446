// Package chaos is qunfa's chaos suite: randomized, seeded runs of the
// whole pipeline in one process — submit, sender turns worked by several
// concurrent workers, the reconciler, the breaker's scheduled check and
// concurrent operator actions (pause, resume, cancel, redrive, resolve,
// budget and rate changes) — with the fault-injecting decorators around the
// store (storefault), the queue (queuefault) and the provider
// (providerfault), the mock provider's own faults (gateway 502 after
// delivery, lost answers, busy, invalid recipients), and senders crashing
// at random points of a turn. Then the faults stop and the run goes on
// until every job is final (or paused as the operator left it) or a bound
// passes, and a judge checks the promises against the mock provider's
// delivery log. Everything runs on a fake clock, so a run takes a fraction
// of a second of wall time and its faults and actions follow from its seed.
//
// The suite is in the package's tests (chaos_test.go); docs/operations.md
// ("The chaos suite") lists the invariants the judge checks and how to
// replay a failing seed.
package chaos
