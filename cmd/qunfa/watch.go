package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/vbauerster/mpb/v8"
	"github.com/vbauerster/mpb/v8/decor"

	"github.com/qunfa/qunfa/apiclient"
	"github.com/qunfa/qunfa/internal/store"
)

// defaultPollEvery is how often watch reads the job.
const defaultPollEvery = 500 * time.Millisecond

// maxPollFailures is how many polls in a row may fail (server restarting,
// network blip) before watch gives up.
const maxPollFailures = 20

// progressView shows a job's progress as it changes.
type progressView interface {
	update(apiclient.Job)
	// close stops the view after the last update.
	close()
}

func (c *cli) watch(ctx context.Context, args []string) error {
	fs := c.newFlagSet("watch")
	strict := fs.Bool("strict", false, "exit 3 unless the job ends completed (default: only when it ends failed)")
	every := fs.Duration("interval", cmpOr(c.pollEvery, defaultPollEvery), "how often to read the job")
	pos, err := c.parse(fs, args, 1, "JOB")
	if err != nil {
		return err
	}
	if *every <= 0 {
		return usagef("--interval must be positive")
	}
	cl, err := c.client()
	if err != nil {
		return err
	}
	job, err := cl.job(ctx, pos[0])
	if err != nil {
		return err
	}
	var view progressView
	if c.isTerminal() {
		view = newBarView(c.stdout, job)
	} else {
		view = &lineView{w: c.stdout}
	}
	ticker := time.NewTicker(*every)
	defer ticker.Stop()
	failures, still := 0, 0
	for {
		view.update(job)
		if settled(job, &still) {
			break
		}
		select {
		case <-ctx.Done():
			view.close()
			return &exitError{code: exitFailure, msg: "interrupted; the job goes on (qunfa status " + job.Id + ")"}
		case <-ticker.C:
		}
		next, err := cl.job(ctx, job.Id)
		if err != nil {
			var p *problem
			if ctx.Err() == nil && (!errors.As(err, &p) || p.Status >= 500) && failures < maxPollFailures {
				failures++
				continue // transient: try again at the next tick
			}
			view.close()
			return err
		}
		failures = 0
		if !sameProgress(job, next) {
			still = 0
		}
		job = next
	}
	view.close()
	done := job.Counts.Confirmed + job.Counts.Failed + job.Counts.Abandoned
	fmt.Fprintf(c.stdout, "job %s %s: %d of %d done (%s)\nfailures: %s\n",
		job.Id, statusText(string(job.Status), job.PauseReason), done, job.Total, countsText(job), failuresText(job.Failures))
	if ct := canaryText(job); ct != "" {
		fmt.Fprintln(c.stdout, ct)
	}
	if string(job.Status) == string(store.JobFailed) || *strict && string(job.Status) != string(store.JobCompleted) {
		return &exitError{code: exitJobNotOK, msg: "the job ended " + string(job.Status)}
	}
	return nil
}

// settleRounds is how many polls without change a job in a final status
// may keep shards unfinished (a cancelled job's senders are abandoning its
// items) before watch stops waiting for them.
const settleRounds = 4

// settled reports whether watching is over: the job is in a final status
// and its shards have caught up, or have stopped moving.
func settled(j apiclient.Job, still *int) bool {
	if !store.JobFinal(store.JobStatus(j.Status)) {
		return false
	}
	allFinal := true
	for _, s := range j.Shards {
		if !store.ShardFinal(store.ShardStatus(s.Status)) {
			allFinal = false
		}
	}
	*still++
	return allFinal || *still > settleRounds
}

// sameProgress reports whether two reads of a job show the same progress.
func sameProgress(a, b apiclient.Job) bool {
	if a.Status != b.Status || a.Counts != b.Counts || len(a.Shards) != len(b.Shards) {
		return false
	}
	for i := range a.Shards {
		if a.Shards[i].Status != b.Shards[i].Status || a.Shards[i].Counts != b.Shards[i].Counts {
			return false
		}
	}
	return true
}

func cmpOr(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

// isTerminal reports whether stdout is a terminal (progress bars) rather
// than a pipe or file (one line per change).
func (c *cli) isTerminal() bool { return c.isTerminalW(c.stdout) }

// isTerminalW reports whether w is a terminal (c.terminal overrides).
func (c *cli) isTerminalW(w io.Writer) bool {
	if c.terminal != nil {
		return *c.terminal
	}
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// lineView prints one line whenever the job's progress changes, for logs
// and pipes.
type lineView struct {
	w    io.Writer
	last string
}

func (v *lineView) update(j apiclient.Job) {
	done := j.Counts.Confirmed + j.Counts.Failed + j.Counts.Abandoned
	var b strings.Builder
	fmt.Fprintf(&b, "%s %d/%d done (%s); failures: %s", statusText(string(j.Status), j.PauseReason), done, j.Total, countsText(j), failuresText(j.Failures))
	if ct := canaryText(j); ct != "" {
		fmt.Fprintf(&b, "; %s", ct)
	}
	if len(j.Shards) <= 8 {
		shards := make([]string, len(j.Shards))
		for i, s := range j.Shards {
			shards[i] = fmt.Sprintf("#%d %s %d/%d %s", s.Index, s.Account, shardDone(s), s.Size, statusText(string(s.Status), s.PauseReason))
		}
		fmt.Fprintf(&b, "; shards: %s", strings.Join(shards, ", "))
	}
	if line := b.String(); line != v.last {
		v.last = line
		fmt.Fprintf(v.w, "%s %s\n", time.Now().Format("15:04:05"), line)
	}
}

func (v *lineView) close() {}

// barView draws live progress bars: the whole job, each shard (account,
// done/size, status) and a line of failures by category.
type barView struct {
	p       *mpb.Progress
	refresh chan any // one render per update: frames match polls
	overall *mpb.Bar
	shards  []*mpb.Bar
	failBar *mpb.Bar
	canBar  *mpb.Bar // nil unless the job has a canary

	mu       sync.Mutex // guards what the decorators read
	status   string
	shardSt  []string
	failures string
	canary   string
}

func newBarView(w io.Writer, j apiclient.Job) *barView {
	v := &barView{refresh: make(chan any), shardSt: make([]string, len(j.Shards))}
	v.p = mpb.New(mpb.WithOutput(w), mpb.WithWidth(48), mpb.WithManualRefresh(v.refresh), mpb.ForceTTY())
	text := func(get func() string) decor.Decorator {
		return decor.Any(func(decor.Statistics) string {
			v.mu.Lock()
			defer v.mu.Unlock()
			return get()
		})
	}
	nameW := len("all shards")
	for _, s := range j.Shards {
		nameW = max(nameW, len(shardName(s)))
	}
	v.overall = v.p.AddBar(max(j.Total, 1),
		mpb.PrependDecorators(decor.Name("all shards", decor.WC{W: nameW, C: decor.DindentRight | decor.DSyncWidth})),
		mpb.AppendDecorators(decor.CountersNoUnit("%d / %d", decor.WCSyncSpace), decor.Name(" "), text(func() string { return v.status })),
	)
	for i, s := range j.Shards {
		v.shards = append(v.shards, v.p.AddBar(max(s.Size, 1),
			mpb.PrependDecorators(decor.Name(shardName(s), decor.WC{W: nameW, C: decor.DindentRight | decor.DSyncWidth})),
			mpb.AppendDecorators(decor.CountersNoUnit("%d / %d", decor.WCSyncSpace), decor.Name(" "), text(func() string { return v.shardSt[i] })),
		))
	}
	v.failBar = v.p.New(1, mpb.NopStyle(), mpb.PrependDecorators(text(func() string { return "failures: " + v.failures })))
	if j.Canary != nil {
		v.canBar = v.p.New(1, mpb.NopStyle(), mpb.PrependDecorators(text(func() string { return v.canary })))
	}
	return v
}

func shardName(s apiclient.Shard) string { return fmt.Sprintf("#%d %s", s.Index, s.Account) }

func (v *barView) update(j apiclient.Job) {
	v.mu.Lock()
	v.status = statusText(string(j.Status), j.PauseReason)
	v.failures = failuresText(j.Failures)
	v.canary = canaryText(j)
	for i, s := range j.Shards {
		if i < len(v.shardSt) {
			v.shardSt[i] = statusText(string(s.Status), s.PauseReason)
		}
	}
	v.mu.Unlock()
	v.overall.SetCurrent(j.Counts.Confirmed + j.Counts.Failed + j.Counts.Abandoned)
	for i, s := range j.Shards {
		if i < len(v.shards) {
			v.shards[i].SetCurrent(shardDone(s))
		}
	}
	v.refresh <- time.Now()
}

// close stops the bars where they stand (a finished job may leave items
// under review, so not every bar is full) and draws the last frame.
func (v *barView) close() {
	for _, b := range append([]*mpb.Bar{v.overall, v.failBar, v.canBar}, v.shards...) {
		if b != nil && !b.Completed() {
			b.Abort(false)
		}
	}
	v.refresh <- time.Now()
	v.p.Wait()
}
