package alert

import (
	"context"
	"sync"
)

// FeedEntry is one event kept by a Feed, numbered in publishing order.
type FeedEntry struct {
	// Seq numbers the entries of one Feed from 1, without gaps.
	Seq   uint64
	Event Event
}

// Feed is a Publisher that keeps the last N events in memory for the
// dashboard's live feed. Readers poll with Recent and Since, or block in
// Wait until something newer than what they have shown arrives. Older
// events fall out of the ring; a reader that fell behind sees it as a gap
// between the Seq it asked after and the first Seq it gets back.
type Feed struct {
	mu      sync.Mutex
	ring    []FeedEntry // capacity N; ring[(seq-1) % N] holds seq
	last    uint64      // Seq of the newest entry, 0 when empty
	changed chan struct{}
}

var _ Publisher = (*Feed)(nil)

// NewFeed returns a Feed that keeps the last capacity events (at least 1).
func NewFeed(capacity int) *Feed {
	if capacity < 1 {
		capacity = 1
	}
	return &Feed{ring: make([]FeedEntry, capacity), changed: make(chan struct{})}
}

// Publish appends events and wakes every Wait. It never fails.
func (f *Feed) Publish(_ context.Context, events ...Event) error {
	if len(events) == 0 {
		return nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, e := range events {
		f.last++
		f.ring[f.slot(f.last)] = FeedEntry{Seq: f.last, Event: e}
	}
	close(f.changed)
	f.changed = make(chan struct{})
	return nil
}

// Last returns the Seq of the newest event, 0 if none was published.
func (f *Feed) Last() uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.last
}

// Recent returns up to n of the newest events, oldest first.
func (f *Feed) Recent(n int) []FeedEntry {
	f.mu.Lock()
	defer f.mu.Unlock()
	if n <= 0 {
		return nil
	}
	from := f.oldest()
	if f.last >= uint64(n) && f.last-uint64(n)+1 > from {
		from = f.last - uint64(n) + 1
	}
	return f.copyFrom(from)
}

// Since returns the retained events with Seq greater than seq, oldest
// first; Since(0) returns everything retained. If the first entry's Seq is
// greater than seq+1, the events between fell out of the ring.
func (f *Feed) Since(seq uint64) []FeedEntry {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.since(seq)
}

// Wait blocks until there are events with Seq greater than seq and returns
// them as Since does, or returns ctx's error when ctx ends first.
func (f *Feed) Wait(ctx context.Context, seq uint64) ([]FeedEntry, error) {
	for {
		f.mu.Lock()
		entries := f.since(seq)
		changed := f.changed
		f.mu.Unlock()
		if len(entries) > 0 {
			return entries, nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

func (f *Feed) since(seq uint64) []FeedEntry {
	if seq >= f.last {
		return nil
	}
	return f.copyFrom(max(seq+1, f.oldest()))
}

// oldest is the Seq of the oldest retained entry (1 when empty).
func (f *Feed) oldest() uint64 {
	if n := uint64(len(f.ring)); f.last > n {
		return f.last - n + 1
	}
	return 1
}

func (f *Feed) copyFrom(from uint64) []FeedEntry {
	if from > f.last {
		return nil
	}
	out := make([]FeedEntry, 0, f.last-from+1)
	for s := from; s <= f.last; s++ {
		out = append(out, f.ring[f.slot(s)])
	}
	return out
}

func (f *Feed) slot(seq uint64) int { return int((seq - 1) % uint64(len(f.ring))) }
