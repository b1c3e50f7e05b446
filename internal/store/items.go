package store

import (
	"context"
	"fmt"
	"time"
)

// CodeReview is the error code the reconciler sets on a submitted item it
// could not settle: the status look-up said the provider has no record of
// the key, or the provider has no look-up and the item waited past the
// settle delay. Only such items are "under review" (see UnderReview).
const CodeReview = "review"

// UnderReview reports whether an item waits for an operator's verdict: it
// is submitted, uncertain, and the reconciler marked it for review. An
// item whose answer was just lost is uncertain too, but it has not been
// looked up yet; resending it could deliver twice.
func UnderReview(it Item) bool {
	return it.Status == ItemSubmitted && it.Error != nil &&
		it.Error.Category == CategoryUncertain && it.Error.Code == CodeReview
}

// TallyConfirmedAfterRetry is a key of Shard.Failures that is not an error
// category: it counts the shard's confirmed items that needed more than one
// attempt ("15 of the delivered needed retries"). Adapters keep it like the
// categories (in the deltas of item operations, folded with them, recounted
// from the items), so it costs no write of its own; JobView.Failures leaves
// it out and JobView.ConfirmedAfterRetry reports it.
const TallyConfirmedAfterRetry = "confirmed_after_retry"

// ConfirmedAfterRetry reports whether an item in this state counts under
// TallyConfirmedAfterRetry: confirmed after more than one attempt.
func ConfirmedAfterRetry(status ItemStatus, attempts int) bool {
	return status == ItemConfirmed && attempts > 1
}

// ItemError is the last error of an item.
type ItemError struct {
	Category string `json:"category"`
	Code     string `json:"code,omitempty"`
	Message  string `json:"message,omitempty"`
}

// Item is one recipient's message.
type Item struct {
	JobID   string
	Shard   int
	Seq     int64 // position in the job, unique per job
	Account string
	To      string
	Vars    map[string]string
	// Ref is the submitter's reference of the recipient (write-once, with
	// the payload); "" = none.
	Ref    string
	Status ItemStatus
	// Attempts counts sends (claims that used an attempt).
	Attempts      int
	NextAttemptAt time.Time
	// SubmittedAt is the time of the latest claim, kept after the item
	// leaves submitted (zero if never claimed).
	SubmittedAt time.Time
	// FinishedAt is when the item entered its terminal status (confirmed,
	// failed, abandoned): the At of that update; zero while not terminal.
	FinishedAt time.Time
	// MsgID is the provider's message id of the accepted send ("" until
	// confirmed, or when the provider gave none).
	MsgID   string
	ClaimID string
	Error   *ItemError // nil unless the item has failed at least once
}

// MaxPutItems is the largest page PutItems accepts.
const MaxPutItems = 500

// PutItemsParams writes one page of the snapshot.
type PutItemsParams struct {
	JobID string
	Items []Item // Seq, Shard, Account, To, Vars, Ref
}

// ClaimItemsParams claims due items of a shard.
type ClaimItemsParams struct {
	JobID   string
	Index   int
	Max     int
	Now     time.Time
	ClaimID string
}

// ClaimItemsResult holds the claimed items (status submitted).
type ClaimItemsResult struct {
	Items []Item
	Delta Counts
	// NextDueAt is the earliest NextAttemptAt of the shard's remaining
	// pending items (zero if none is pending), so the sender knows how
	// long to wait when nothing was due.
	NextDueAt time.Time
}

// ItemUpdate is one conditional item change.
type ItemUpdate struct {
	Seq     int64
	From    ItemStatus
	ClaimID string // when set, must match the item's ClaimID
	To      ItemStatus
	// Error replaces the item's error (nil clears it unless KeepError).
	Error     *ItemError
	KeepError bool
	// NextAttemptAt applies when To is pending.
	NextAttemptAt time.Time
	// AttemptsDelta is added to Attempts (e.g. −1 to give back the attempt
	// of a rate-limited send).
	AttemptsDelta int
	// ResetAttempts sets Attempts to 0 (redrive) before AttemptsDelta.
	ResetAttempts bool
	// MsgID is the provider's message id, stored when To is confirmed.
	// Entering a terminal status sets FinishedAt to the update's At;
	// leaving it clears FinishedAt and MsgID.
	MsgID string
}

// UpdateItemsParams changes items of one shard.
type UpdateItemsParams struct {
	JobID   string
	Index   int
	Updates []ItemUpdate
	At      time.Time
}

// UpdateItemsResult reports what changed.
type UpdateItemsResult struct {
	Delta         Counts
	FailuresDelta map[string]int64
	// Rejected lists the seqs whose condition failed (nothing changed).
	Rejected []int64
}

// ListItemsParams pages a job's items.
type ListItemsParams struct {
	JobID    string
	Status   ItemStatus // empty = any
	Category string     // empty = any; matches Error.Category
	Ref      string     // empty = any; matches Ref exactly
	Shard    *int       // nil = all shards
	Cursor   string
	Limit    int // 0 = adapter default (100)
}

// ListItemsResult is one page of items.
type ListItemsResult struct {
	Items      []Item
	NextCursor string
}

// WorkItems calls fn with each non-empty page of the items p selects, in
// seq order, following cursors past empty pages (an adapter may answer an
// empty page before the end: Store.ListItems). fn changes items so that
// they leave the selection; after a pass in which it changed anything,
// WorkItems passes over the selection again, so an item that entered it
// behind the cursor meanwhile is seen too. It ends after a pass that
// changed nothing, when fn says stop, or on the first error.
func WorkItems(ctx context.Context, st Store, p ListItemsParams, fn func(items []Item) (changed, stop bool, err error)) error {
	for {
		changed := false
		p.Cursor = ""
		for {
			page, err := st.ListItems(ctx, p)
			if err != nil {
				return fmt.Errorf("list items of %s: %w", p.JobID, err)
			}
			if len(page.Items) > 0 {
				ch, stop, err := fn(page.Items)
				if err != nil || stop {
					return err
				}
				changed = changed || ch
			}
			if page.NextCursor == "" {
				break
			}
			p.Cursor = page.NextCursor
		}
		if !changed {
			return nil
		}
	}
}

// ListSubmittedItemsParams selects items left submitted.
type ListSubmittedItemsParams struct {
	SubmittedBefore time.Time
	Cursor          string
	Limit           int
}

// GetItemsParams names items of one shard by seq.
type GetItemsParams struct {
	JobID string
	Shard int
	// Seqs are at most MaxPutItems seqs, in any order.
	Seqs []int64
}

// ItemGetter reads items by seq: the reconciler reads the items a provider
// event settles (who they went to, for their outcomes) without listing
// their shard. Both adapters implement it and storetest proves them.
type ItemGetter interface {
	// GetItems returns the items of p.Seqs in seq order; a seq with no
	// item in the shard is left out. ErrNotFound: no such job;
	// ErrInvalidArgument: more than MaxPutItems seqs.
	GetItems(ctx context.Context, p GetItemsParams) ([]Item, error)
}
