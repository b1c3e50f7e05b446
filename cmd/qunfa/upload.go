package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/vbauerster/mpb/v8"
	"github.com/vbauerster/mpb/v8/decor"

	"github.com/qunfa/qunfa/apiclient"
	"github.com/qunfa/qunfa/internal/submit"
)

// stagedUpload is one run of submit --recipients.
type stagedUpload struct {
	name, template, path, key string
	partBytes                 int
	opts                      submitOptions
}

// uploadAttempts is how often a part upload is tried when the server is
// unreachable or answers 5xx (a restart of qunfa dev, a network blip).
const uploadAttempts = 5

// uploadRetryWait is the pause between those attempts.
var uploadRetryWait = time.Second

// mediaTypeOf says from a file's extension how its parts are sent.
func mediaTypeOf(path string) (string, error) {
	switch strings.ToLower(filepath.Ext(path)) {
	case ".csv":
		return formatCSV, nil
	case ".ndjson", ".jsonl":
		return formatNDJSON, nil
	}
	return "", usagef("--recipients %s: the file must end in .csv (header account,to[,ref][,var.<name>...]) or .ndjson (one recipient object per line)", path)
}

// submitStaged creates a staging job (or finds the one of the same key),
// uploads the parts of the file the server does not have yet, starts the
// job and prints its id. Memory stays that of one part whatever the
// file's size.
func (c *cli) submitStaged(ctx context.Context, u stagedUpload) error {
	mt, err := mediaTypeOf(u.path)
	if err != nil {
		return err
	}
	if strings.TrimSpace(u.template) == "" {
		return usagef("--template is required with --recipients")
	}
	if u.partBytes < minPartBytes || u.partBytes > defaultPartBytes {
		return usagef("--part-size must be from %d to %d bytes", minPartBytes, defaultPartBytes)
	}
	f, err := os.Open(u.path)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	cl, err := c.client()
	if err != nil {
		return err
	}
	if u.key == "" {
		var b [12]byte
		_, _ = rand.Read(b[:])
		u.key = "cli-" + hex.EncodeToString(b[:])
		fmt.Fprintf(c.stderr, "idempotency key %s (if interrupted, run again with --key %s to resume)\n", u.key, u.key)
	}
	staged := true
	req := apiclient.JobRequest{Template: u.template, Staged: &staged, Canary: u.opts.canary}
	if u.name != "" {
		req.Name = &u.name
	}
	created, err := cl.SubmitJobWithResponse(ctx, &apiclient.SubmitJobParams{IdempotencyKey: &u.key}, req)
	if err := cl.check(created, err, http.StatusCreated); err != nil {
		return err
	}
	job := *created.JSON201
	if job.Status != "staging" && u.opts.preview {
		return fmt.Errorf("job %s was started before with key %s (it is %s): there is nothing to preview; see qunfa status %s", job.Id, u.key, job.Status, job.Id)
	}
	if job.Status != "staging" {
		fmt.Fprintf(c.stderr, "job %s was started before with key %s: it is %s\n", job.Id, u.key, job.Status)
		fmt.Fprintln(c.stdout, job.Id)
		return nil
	}
	listed, err := cl.ListJobPartsWithResponse(ctx, job.Id)
	if err := cl.check(listed, err, http.StatusOK); err != nil {
		return err
	}
	stored := make(map[int]apiclient.PartListEntry, len(listed.JSON200.Parts))
	for _, p := range listed.JSON200.Parts {
		stored[int(p.Part)] = p
	}

	prog := c.newUploadProgress(fi.Size(), u.path)
	cut := newPartCutter(f, mt, u.partBytes)
	var parts, uploaded, recipients int
	for {
		p, err := cut.next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			prog.abort()
			var le *lineError
			if errors.As(err, &le) {
				return fmt.Errorf("%s %v; nothing was started (job %s stays staging)", u.path, err, job.Id)
			}
			return fmt.Errorf("read %s: %w", u.path, err)
		}
		parts = p.Number
		digest := submit.PartDigest(mt, p.Body)
		if s, ok := stored[p.Number]; ok {
			if s.Digest != digest {
				prog.abort()
				return fmt.Errorf("part %d of job %s was uploaded from another file (or with another --part-size): "+
					"the file changed since key %s was first used; submit it with a new --key", p.Number, job.Id, u.key)
			}
			recipients += int(s.Recipients)
			prog.advance(p, false)
			continue
		}
		n, err := c.putPart(ctx, cl, job.Id, mt, p)
		if err != nil {
			prog.abort()
			where := fmt.Sprintf("part %d, lines %d to %d of %s", p.Number, p.FirstLine, p.LastLine, u.path)
			var prob *problem
			switch {
			case errors.As(err, &prob) && prob.Status == http.StatusUnprocessableEntity:
				for i := range prob.Errors {
					prob.Errors[i].Field = u.path + " " + cut.fileField(p, prob.Errors[i].Field)
				}
				prob.Detail += fmt.Sprintf(" (%s); nothing was started: fix the file and run again with --key %s", where, u.key)
			case errors.As(err, &prob):
				prob.Detail += fmt.Sprintf(" (%s); nothing was started: run again with --key %s to resume", where, u.key)
			default:
				return fmt.Errorf("%s: %w; nothing was started: run again with --key %s to resume", where, err, u.key)
			}
			return err
		}
		recipients += n
		uploaded++
		prog.advance(p, true)
	}
	if parts == 0 {
		prog.abort()
		return fmt.Errorf("%s has no recipients", u.path)
	}
	if u.opts.preview {
		prog.done()
		pv, err := cl.PreviewStagedJobWithResponse(ctx, job.Id)
		if err := cl.check(pv, err, http.StatusOK); err != nil {
			return err
		}
		note := c.stderr // stdout is the preview's JSON
		if u.opts.output != "json" {
			note = c.stdout
		}
		if err := c.show(u.opts.output, pv.Body, func(w io.Writer) { printPreview(w, *pv.JSON200) }); err != nil {
			return err
		}
		fmt.Fprintf(note, "job %s stays staging (%d recipients in %d parts uploaded): nothing was sent or started; "+
			"to start it, run the same command without --preview, with --key %s\n", job.Id, recipients, parts, u.key)
		return nil
	}
	started, err := cl.StartJobWithResponse(ctx, job.Id, apiclient.StartRequest{Parts: int64(parts)})
	if err := cl.check(started, err, http.StatusAccepted); err != nil {
		prog.abort()
		return err
	}
	prog.done()
	fmt.Fprintf(c.stderr, "job %s %s: %d recipients in %d parts (%d uploaded now, %d already there)\n",
		job.Id, started.JSON202.Status, recipients, parts, uploaded, parts-uploaded)
	fmt.Fprintln(c.stdout, job.Id)
	return nil
}

// putPart uploads one part, trying again while the server is unreachable
// or failing (5xx), and returns its recipient count.
func (c *cli) putPart(ctx context.Context, cl *apiClient, jobID, mt string, p filePart) (int, error) {
	var last error
	for attempt := 0; attempt < uploadAttempts; attempt++ {
		if attempt > 0 {
			select {
			case <-ctx.Done():
				return 0, ctx.Err()
			case <-time.After(uploadRetryWait):
			}
		}
		resp, err := cl.PutJobRecipientsWithBodyWithResponse(ctx, jobID, int64(p.Number), mt, bytes.NewReader(p.Body))
		last = cl.check(resp, err, http.StatusOK)
		if last == nil {
			return int(resp.JSON200.Recipients), nil
		}
		var prob *problem
		if errors.Is(last, context.Canceled) || errors.As(last, &prob) && prob.Status < 500 {
			break
		}
	}
	return 0, last
}

// uploadProgress shows an upload: a bar on a terminal, a line per part
// otherwise (on stderr: stdout is the job id).
type uploadProgress struct {
	w   io.Writer
	p   *mpb.Progress
	bar *mpb.Bar
}

func (c *cli) newUploadProgress(size int64, name string) *uploadProgress {
	u := &uploadProgress{w: c.stderr}
	if !c.isTerminalW(c.stderr) {
		return u
	}
	u.p = mpb.New(mpb.WithOutput(c.stderr), mpb.WithWidth(48), mpb.WithAutoRefresh(), mpb.ForceTTY())
	u.bar = u.p.AddBar(max(size, 1),
		mpb.PrependDecorators(decor.Name(filepath.Base(name)+" ", decor.WCSyncSpaceR)),
		mpb.AppendDecorators(decor.Counters(decor.SizeB1024(0), "% .1f / % .1f", decor.WCSyncSpace), decor.Name(" "), decor.Percentage()),
	)
	return u
}

func (u *uploadProgress) advance(p filePart, uploaded bool) {
	if u.bar != nil {
		u.bar.IncrInt64(p.FileBytes)
		return
	}
	what := "uploaded"
	if !uploaded {
		what = "already there"
	}
	fmt.Fprintf(u.w, "part %d (lines %d…): %s\n", p.Number, p.FirstLine, what)
}

func (u *uploadProgress) done() {
	if u.bar != nil {
		u.bar.SetTotal(-1, true)
		u.p.Wait()
	}
}

func (u *uploadProgress) abort() {
	if u.bar != nil {
		u.bar.Abort(false)
		u.p.Wait()
		u.bar = nil
	}
}
