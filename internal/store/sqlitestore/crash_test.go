package sqlitestore

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/store"
)

// The crash test re-executes the test binary as worker processes that
// hammer one store file, and SIGKILLs them at random points of their
// progress. These variables name its environment switch and fixture.
const (
	crashEnvDir    = "QUNFA_SQLITESTORE_CRASH_DIR"
	crashEnvWorker = "QUNFA_SQLITESTORE_CRASH_WORKER"
	crashJob       = "crash-job"
	crashPerShard  = 4000
	crashShards    = 3 // shards 0 and 1: one worker each, with turns; shard 2: shared
	crashRounds    = 4
)

var crashEpoch = time.Date(2031, 1, 2, 3, 4, 5, 0, time.UTC)

func TestCrashSafety(t *testing.T) {
	if dir := os.Getenv(crashEnvDir); dir != "" {
		worker, _ := strconv.Atoi(os.Getenv(crashEnvWorker))
		err := crashWorker(dir, worker)
		if err != nil {
			fmt.Fprintln(os.Stderr, "crash worker:", err)
			os.Exit(3)
		}
		os.Exit(0)
	}
	if testing.Short() {
		t.Skip("re-executes the test binary")
	}
	t.Parallel()
	ctx := t.Context()
	dir := t.TempDir()
	path := filepath.Join(dir, "data", "store.db")
	s, err := Open(ctx, path)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	createCrashJob(t, s)
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}

	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	for round := range crashRounds {
		var wg sync.WaitGroup
		errs := make([]error, 2)
		for w := range 2 {
			killAfter := 5 + rng.IntN(120)
			wg.Go(func() { errs[w] = runAndKill(t, dir, w, killAfter) })
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		checkAfterCrash(t, path, dir, round)
	}
}

// runAndKill starts worker w and SIGKILLs it after it reported killAfter
// operations (or lets it finish when it runs out of work first).
func runAndKill(t *testing.T, dir string, w, killAfter int) error {
	cmd := exec.Command(os.Args[0], "-test.run=^TestCrashSafety$", "-test.count=1")
	cmd.Env = append(os.Environ(), crashEnvDir+"="+dir, crashEnvWorker+"="+strconv.Itoa(w))
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	sc := bufio.NewScanner(out)
	ops, done := 0, false
	for sc.Scan() {
		if sc.Text() == "done" {
			done = true
			break
		}
		ops++
		if ops >= killAfter {
			_ = cmd.Process.Signal(syscall.SIGKILL)
			break
		}
	}
	go func() { _, _ = bufioDrain(out) }()
	err = cmd.Wait()
	t.Logf("worker %d: killed after %d ops (done %v)", w, ops, done)
	if done {
		if err != nil {
			return fmt.Errorf("worker %d: %v: %s", w, err, stderr.String())
		}
		return nil
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		return fmt.Errorf("worker %d ended with %v before the kill: %s", w, err, stderr.String())
	}
	return nil
}

func bufioDrain(r interface{ Read([]byte) (int, error) }) (int, error) {
	buf := make([]byte, 4096)
	n := 0
	for {
		k, err := r.Read(buf)
		n += k
		if err != nil {
			return n, err
		}
	}
}

func createCrashJob(t *testing.T, s *Store) {
	t.Helper()
	ctx := t.Context()
	p := store.CreateJobParams{Job: store.Job{ID: crashJob, Tenant: "t", Total: crashShards * crashPerShard, CreatedAt: crashEpoch}}
	for i := range crashShards {
		p.Shards = append(p.Shards, store.Shard{Index: i, Account: "acct", Size: crashPerShard})
	}
	if _, err := s.CreateJob(ctx, p); err != nil {
		t.Fatalf("CreateJob: %v", err)
	}
	var page []store.Item
	for seq := int64(0); seq < crashShards*crashPerShard; seq++ {
		page = append(page, store.Item{Seq: seq, Shard: int(seq % crashShards), Account: "acct", To: fmt.Sprintf("u%d", seq),
			Vars: map[string]string{"name": "x"}})
		if len(page) == store.MaxPutItems {
			if err := s.PutItems(ctx, store.PutItemsParams{JobID: crashJob, Items: page}); err != nil {
				t.Fatalf("PutItems: %v", err)
			}
			page = page[:0]
		}
	}
	if _, err := s.TransitionJob(ctx, store.TransitionJobParams{JobID: crashJob, To: store.JobRunning, At: crashEpoch}); err != nil {
		t.Fatalf("TransitionJob: %v", err)
	}
}

// crashWorker is the child process: it claims and settles items of its own
// shard (in sender turns) and of the shared shard, takes tokens, and logs
// every claimed seq to the side file after the claim returned.
func crashWorker(dir string, w int) error {
	ctx := context.Background()
	s, err := Open(ctx, filepath.Join(dir, "data", "store.db"))
	if err != nil {
		return err
	}
	side, err := os.OpenFile(filepath.Join(dir, "claims.log"), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	report := func() { fmt.Println("op") }
	pid := os.Getpid()
	logClaims := func(shard int, items []store.Item) error {
		var b strings.Builder
		for _, it := range items {
			fmt.Fprintf(&b, "%d %d %d\n", shard, it.Seq, pid)
		}
		if _, err := side.WriteString(b.String()); err != nil {
			return err
		}
		return side.Sync()
	}
	settle := func(shard int, claimID string, items []store.Item) (store.UpdateItemsResult, error) {
		ups := make([]store.ItemUpdate, 0, len(items))
		for _, it := range items {
			u := store.ItemUpdate{Seq: it.Seq, From: store.ItemSubmitted, ClaimID: claimID, To: store.ItemConfirmed}
			switch {
			case it.Seq%7 == 0:
				u.To, u.Error = store.ItemFailed, &store.ItemError{Category: store.CategoryPermanent, Code: "40003"}
			case it.Seq%11 == 0:
				u.To, u.Error = store.ItemSubmitted, &store.ItemError{Category: store.CategoryUncertain}
			}
			ups = append(ups, u)
		}
		return s.UpdateItems(ctx, store.UpdateItemsParams{JobID: crashJob, Index: shard, Updates: ups})
	}
	now := crashEpoch
	for n := 0; ; n++ {
		now = now.Add(time.Millisecond)
		idle := true
		// A sender turn on the worker's own shard.
		sh, err := s.GetShard(ctx, crashJob, w)
		if err != nil {
			return err
		}
		msg := fmt.Sprintf("m-%d-%d", pid, n)
		if _, err := s.BeginTurn(ctx, store.BeginTurnParams{JobID: crashJob, Index: w, Turn: sh.Turn + 1, MessageID: msg, At: now}); err != nil {
			return err
		}
		report()
		for k := range 3 {
			if _, err := s.TakeTokens(ctx, store.TakeTokensParams{Bucket: "acct", Want: 20, RatePerSec: 1e6, Burst: 100, Now: now}); err != nil {
				return err
			}
			claimID := fmt.Sprintf("c-%d-%d-%d", pid, n, k)
			c, err := s.ClaimItems(ctx, store.ClaimItemsParams{JobID: crashJob, Index: w, Max: 20, Now: now, ClaimID: claimID})
			if err != nil {
				return err
			}
			if err := logClaims(w, c.Items); err != nil {
				return err
			}
			report()
			u, err := settle(w, claimID, c.Items)
			if err != nil {
				return err
			}
			if len(u.Rejected) > 0 {
				return fmt.Errorf("own claim %s rejected %v", claimID, u.Rejected)
			}
			report()
			var cursor int64
			if len(c.Items) > 0 {
				idle = false
				cursor = c.Items[len(c.Items)-1].Seq + 1
			}
			if _, err := s.AdvanceShard(ctx, store.AdvanceShardParams{JobID: crashJob, Index: w, Turn: sh.Turn + 1,
				Delta: c.Delta.Add(u.Delta), FailuresDelta: u.FailuresDelta, Cursor: cursor, At: now, EndTurn: k == 2}); err != nil {
				return err
			}
			report()
		}
		// The shared shard, outside turns.
		claimID := fmt.Sprintf("s-%d-%d", pid, n)
		c, err := s.ClaimItems(ctx, store.ClaimItemsParams{JobID: crashJob, Index: 2, Max: 10, Now: now, ClaimID: claimID})
		if err != nil {
			return err
		}
		if err := logClaims(2, c.Items); err != nil {
			return err
		}
		report()
		u, err := settle(2, claimID, c.Items)
		if err != nil {
			return err
		}
		if len(c.Items) > 0 {
			idle = false
			if _, err := s.AddShardCounts(ctx, store.AddShardCountsParams{JobID: crashJob, Index: 2, Delta: c.Delta.Add(u.Delta), FailuresDelta: u.FailuresDelta}); err != nil {
				return err
			}
		}
		report()
		if idle {
			fmt.Println("done")
			return s.Close()
		}
	}
}

// checkAfterCrash reopens the store after the workers were killed and
// checks the file, the items, the counts and the claim log.
func checkAfterCrash(t *testing.T, path, dir string, round int) {
	t.Helper()
	ctx := t.Context()
	s, err := Open(ctx, path)
	if err != nil {
		t.Fatalf("round %d: reopen: %v", round, err)
	}
	defer s.Close()
	var ok string
	if err := s.w.QueryRowContext(ctx, "PRAGMA integrity_check").Scan(&ok); err != nil || ok != "ok" {
		t.Fatalf("round %d: integrity_check = %q, %v", round, ok, err)
	}
	var bad int
	if err := s.r.QueryRowContext(ctx, "SELECT count(*) FROM items WHERE status NOT BETWEEN 0 AND 4").Scan(&bad); err != nil || bad != 0 {
		t.Fatalf("round %d: %d items with an unknown status (%v)", round, bad, err)
	}

	items := map[int64]store.Item{}
	for _, it := range listAllItems(t, s, crashJob) {
		items[it.Seq] = it
	}
	if len(items) != crashShards*crashPerShard {
		t.Fatalf("round %d: %d items, want %d", round, len(items), crashShards*crashPerShard)
	}

	// No seq claimed twice, and every logged claim is no longer pending.
	raw, err := os.ReadFile(filepath.Join(dir, "claims.log"))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	seen := map[int64]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		if line == "" {
			continue
		}
		f := strings.Fields(line)
		if len(f) != 3 {
			t.Fatalf("round %d: torn claim log line %q", round, line)
		}
		seq, _ := strconv.ParseInt(f[1], 10, 64)
		if prev, dup := seen[seq]; dup {
			t.Fatalf("round %d: seq %d claimed twice (by process %s and %s)", round, seq, prev, f[2])
		}
		seen[seq] = f[2]
		if it := items[seq]; it.Status == store.ItemPending {
			t.Fatalf("round %d: seq %d logged as claimed but pending", round, seq)
		}
	}
	t.Logf("round %d: %d claims logged", round, len(seen))

	for i := range crashShards {
		sh, err := s.GetShard(ctx, crashJob, i)
		if err != nil {
			t.Fatal(err)
		}
		if i < 2 {
			// The next turn repairs a shard left Dirty by the kill; a clean
			// one must already be right.
			sh, err = s.BeginTurn(ctx, store.BeginTurnParams{JobID: crashJob, Index: i, Turn: sh.Turn + 1, MessageID: fmt.Sprintf("check-%d", round), At: crashEpoch})
			if err != nil {
				t.Fatalf("round %d: BeginTurn(%d): %v", round, i, err)
			}
			checkCounts(t, sh, items)
			sh, err = s.AdvanceShard(ctx, store.AdvanceShardParams{JobID: crashJob, Index: i, Turn: sh.Turn, EndTurn: true})
			if err != nil {
				t.Fatalf("round %d: AdvanceShard(%d): %v", round, i, err)
			}
		}
		sh, err = s.RecountShard(ctx, crashJob, i)
		if err != nil {
			t.Fatalf("round %d: RecountShard(%d): %v", round, i, err)
		}
		checkCounts(t, sh, items)
	}
	var tokens float64
	if err := s.r.QueryRowContext(ctx, "SELECT tokens FROM buckets WHERE name = 'acct'").Scan(&tokens); err == nil && tokens > 100 {
		t.Fatalf("round %d: bucket holds %v tokens, burst 100", round, tokens)
	}
}

func checkCounts(t *testing.T, sh store.Shard, items map[int64]store.Item) {
	t.Helper()
	var c store.Counts
	f := map[string]int64{}
	for _, it := range items {
		if it.Shard != sh.Index {
			continue
		}
		*countField(&c, it.Status)++
		cat := ""
		if it.Error != nil {
			cat = it.Error.Category
		}
		if k := carriedCategory(it.Status, cat); k != "" {
			f[k]++
		}
	}
	if sh.Counts != c || c.Total() != sh.Size {
		t.Fatalf("shard %d counts %+v, items say %+v, size %d", sh.Index, sh.Counts, c, sh.Size)
	}
	if fmt.Sprint(sh.Failures) != fmt.Sprint(f) {
		t.Fatalf("shard %d failures %v, items say %v", sh.Index, sh.Failures, f)
	}
}

func listAllItems(t *testing.T, s *Store, jobID string) []store.Item {
	t.Helper()
	var all []store.Item
	cursor := ""
	for {
		res, err := s.ListItems(t.Context(), store.ListItemsParams{JobID: jobID, Cursor: cursor, Limit: 1000})
		if err != nil {
			t.Fatalf("ListItems: %v", err)
		}
		all = append(all, res.Items...)
		if res.NextCursor == "" {
			return all
		}
		cursor = res.NextCursor
	}
}
