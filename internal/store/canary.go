package store

// CanaryResults counts the canary's outcomes in a job view while the canary
// is not approved (every item sent so far is a canary item): confirmed,
// and failed or abandoned (but not cancelled).
func CanaryResults(v JobView) (confirmed, failed int64) {
	c := v.Counts()
	return c.Confirmed, c.Failed + c.Abandoned - v.Failures()[CategoryCancelled]
}

// CanaryQuotas spreads a canary of n items over shards of the given sizes:
// one item per shard in turn (never more than a shard holds) until n are
// placed. A shard's canary is its first quota items by seq.
func CanaryQuotas(sizes []int64, n int64) []int64 {
	q := make([]int64, len(sizes))
	for n > 0 {
		placed := false
		for i := range sizes {
			if n > 0 && q[i] < sizes[i] {
				q[i]++
				n--
				placed = true
			}
		}
		if !placed {
			break
		}
	}
	return q
}
