package sender_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/sender"
	"github.com/qunfa/qunfa/internal/store"
	"github.com/qunfa/qunfa/internal/store/sqlitestore"
	"github.com/qunfa/qunfa/internal/store/storetest"
)

// emptyPagesStore answers every other ListItems call with an empty page
// and a cursor to go on from, and the others with at most 3 items, as an
// adapter that bounds what a call reads may (the DynamoDB store does on a
// large job): only an empty cursor means the end.
type emptyPagesStore struct {
	store.Store
	calls int
}

func (e *emptyPagesStore) ListItems(ctx context.Context, p store.ListItemsParams) (store.ListItemsResult, error) {
	e.calls++
	inner := strings.TrimPrefix(p.Cursor, "w:")
	if e.calls%2 == 1 {
		return store.ListItemsResult{Items: []store.Item{}, NextCursor: "w:" + inner}, nil
	}
	p.Cursor, p.Limit = inner, 3
	res, err := e.Store.ListItems(ctx, p)
	if res.NextCursor != "" {
		res.NextCursor = "w:" + res.NextCursor
	}
	return res, err
}

// Abandoning a cancelled shard's pending items goes past empty pages:
// before, the first empty page ended it and the items stayed pending in a
// cancelled job for ever.
func TestAbandonPendingFollowsEmptyPages(t *testing.T) {
	ctx := context.Background()
	st, err := sqlitestore.Open(ctx, filepath.Join(t.TempDir(), "store.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	p, items := storetest.NewJob("tenant-a", 2, 10)
	if _, err := st.CreateJob(ctx, p); err != nil {
		t.Fatal(err)
	}
	if err := st.PutItems(ctx, store.PutItemsParams{JobID: p.Job.ID, Items: items}); err != nil {
		t.Fatal(err)
	}
	paged := &emptyPagesStore{Store: st}
	if err := sender.AbandonPending(ctx, paged, p.Job.ID, 1, "job cancelled", storetest.Epoch.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	res, err := st.ListItems(ctx, store.ListItemsParams{JobID: p.Job.ID, Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	for _, it := range res.Items {
		want := store.ItemPending
		if it.Shard == 1 {
			want = store.ItemAbandoned
		}
		if it.Status != want {
			t.Errorf("item %d of shard %d is %s, want %s", it.Seq, it.Shard, it.Status, want)
		}
	}
	sh, err := st.GetShard(ctx, p.Job.ID, 1)
	if err != nil {
		t.Fatal(err)
	}
	if sh.Counts != (store.Counts{Abandoned: 10}) {
		t.Errorf("shard 1 counts %+v, want 10 abandoned", sh.Counts)
	}
	if paged.calls < 8 {
		t.Errorf("%d list calls: the empty pages were not exercised", paged.calls)
	}
}
