package sender_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/sender"
	"github.com/qunfa/qunfa/internal/submit"
)

// TestFailedTurnWarnsOnlyOfItsOwnError: a turn stopped by a store error
// returns that error and folds what it knows; when the fold succeeds
// there is nothing more to warn about, so the turn's log holds no
// "fold progress of a failed turn" warning (a warning with no error on
// every failed turn would hide the folds that really fail).
func TestFailedTurnWarnsOnlyOfItsOwnError(t *testing.T) {
	t.Parallel()
	p, _ := fakePipeline(t, sender.Config{ClaimBatch: 5})
	p.account("a", 1000, 1000, 0, 1)
	var logs bytes.Buffer
	fs := &failJobReadStore{Store: p.store, release: make(chan struct{})}
	fs.armed.Store(true) // the turn's first job read fails
	s2 := *p.sender
	s2.Store = fs
	s2.Log = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	p.submit(submit.Request{Template: "hi {{n}}", Recipients: recipients([]string{"a"}, 3)}, "warn")
	_, err := s2.HandleTurn(context.Background(), p.nextTurn(time.Hour))
	if !errors.Is(err, errJobRead) {
		t.Fatalf("turn error %v, want the injected one", err)
	}
	if strings.Contains(logs.String(), "fold progress of a failed turn") {
		t.Fatalf("a failed turn whose fold succeeded warned of its fold:\n%s", logs.String())
	}
}
