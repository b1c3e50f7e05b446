package dynamostore

import (
	"slices"
	"testing"
)

// TestPageClaimsAndOrdinals: the small helpers the item code decides with.
// ordinal maps a seq to its slot and every seq not in the page to -1 (an
// update or read of a seq of another shard must touch no slot); addClaim
// keeps one entry per (claim id, claim time); compactClaims keeps exactly
// the claims of submitted slots, once each, in first-use order, and drops
// a claim index past the list instead of failing; minSubmittedAt is the
// earliest claim time of the submitted slots only.
func TestPageClaimsAndOrdinals(t *testing.T) {
	t.Parallel()
	m := members{seqs: []int64{3, 5, 9}}
	for seq, want := range map[int64]int{3: 0, 5: 1, 9: 2, 0: -1, 4: -1, 6: -1, 10: -1} {
		if got := m.ordinal(seq); got != want {
			t.Errorf("ordinal(%d) of %v = %d, want %d", seq, m.seqs, got, want)
		}
	}

	var p page
	a := p.addClaim("c1", 100)
	if again := p.addClaim("c1", 100); again != a {
		t.Errorf("the same claim added twice: %d then %d", a, again)
	}
	if later := p.addClaim("c1", 200); later == a {
		t.Errorf("claim c1 at another time shares index %d", a)
	}
	if other := p.addClaim("c2", 100); other == a {
		t.Errorf("claim c2 at the same time shares index %d", a)
	}
	if want := []claimRef{{"c1", 100}, {"c1", 200}, {"c2", 100}}; !slices.Equal(p.claims, want) {
		t.Errorf("claims %v, want %v", p.claims, want)
	}

	p = page{
		claims: []claimRef{{"a", 10}, {"b", 20}, {"c", 30}},
		slots: []slot{
			{status: 's', claim: 1},
			{status: 'c', claim: 0}, // left submitted: its claim goes
			{status: 's', claim: 1},
			{status: 's', claim: 2},
			{status: 'p', claim: -1},
			{status: 's', claim: 3}, // past the list: dropped
		},
	}
	p.compactClaims()
	if want := []claimRef{{"b", 20}, {"c", 30}}; !slices.Equal(p.claims, want) {
		t.Errorf("claims after compacting %v, want %v", p.claims, want)
	}
	var got []int
	for _, s := range p.slots {
		got = append(got, s.claim)
	}
	if want := []int{0, -1, 0, 1, -1, -1}; !slices.Equal(got, want) {
		t.Errorf("slot claims after compacting %v, want %v", got, want)
	}

	p = page{
		claims: []claimRef{{"a", 200}, {"b", 100}, {"c", 50}},
		slots: []slot{
			{status: 's', claim: 0},
			{status: 's', claim: 1},
			{status: 'c', claim: 2}, // not submitted: not counted
			{status: 's', claim: 3}, // past the list: not counted
			{status: 'p', claim: -1},
		},
	}
	if at, ok := p.minSubmittedAt(); !ok || at != 100 {
		t.Errorf("minSubmittedAt = %d, %v; want 100, true", at, ok)
	}
	p.slots = p.slots[2:]
	if at, ok := p.minSubmittedAt(); ok {
		t.Errorf("minSubmittedAt of a page without a valid submitted slot = %d, true", at)
	}
}
