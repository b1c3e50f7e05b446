package submit_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/qunfa/qunfa/internal/dispatch"
	"github.com/qunfa/qunfa/internal/queue"
	"github.com/qunfa/qunfa/internal/store"
	"github.com/qunfa/qunfa/internal/submit"
)

// drainPlans runs planning messages until none is left and returns the
// shard turns enqueued; crashAfter > 0 drops the message of that step
// unacknowledged (a crash) once, so it is delivered again.
func (f *fixture) drainPlans(t *testing.T, crashAt int) (turns int) {
	t.Helper()
	ctx := context.Background()
	for step := 1; step < 1000; step++ {
		msgs, err := f.q.Receive(ctx, queue.ReceiveParams{Max: 10})
		if err != nil {
			t.Fatal(err)
		}
		if len(msgs) == 0 {
			return turns
		}
		for _, m := range msgs {
			job, ok := dispatch.DecodePlan(m.Body)
			if !ok {
				turns++
				if err := f.q.Delete(ctx, m.ReceiptHandle); err != nil {
					t.Fatal(err)
				}
				continue
			}
			if err := f.sub.Plan(ctx, job); err != nil {
				t.Fatalf("Plan(%s): %v", job, err)
			}
			if step == crashAt {
				// The step ran, its message was never acknowledged.
				if err := f.q.ChangeVisibility(ctx, m.ReceiptHandle, 0); err != nil {
					t.Fatal(err)
				}
				continue
			}
			if err := f.q.Delete(ctx, m.ReceiptHandle); err != nil {
				t.Fatal(err)
			}
		}
	}
	t.Fatal("planning did not end")
	return turns
}

func (f *fixture) stagedJob(t *testing.T, key string) store.Job {
	t.Helper()
	res, err := f.sub.CreateStaged(context.Background(), submit.Params{Tenant: "t1", IdempotencyKey: key,
		Request: submit.Request{Name: "big", Template: "Hi {{name}}"}})
	if err != nil || res.Job.Job.Status != store.JobStaging {
		t.Fatalf("CreateStaged = %+v, %v", res, err)
	}
	return res.Job.Job
}

func (f *fixture) put(t *testing.T, job store.Job, n int, media, body string) (submit.PutPartResult, error) {
	t.Helper()
	return f.sub.PutPart(context.Background(), submit.PutPartParams{Job: job, Number: n, MediaType: media, Body: []byte(body)})
}

func ndjson(account string, from, to int) string {
	var b strings.Builder
	for i := from; i < to; i++ {
		fmt.Fprintf(&b, `{"account":%q,"to":"u%d","vars":{"name":"N%d"},"ref":"r%d"}`+"\n", account, i, i, i)
	}
	return b.String()
}

func TestStagedPlanningDedupesAcrossPartsAndSurvivesARepeatedStep(t *testing.T) {
	for _, crashAt := range []int{0, 1, 2, 3, 4} {
		t.Run(fmt.Sprintf("crash at step %d", crashAt), func(t *testing.T) {
			t.Parallel()
			// Shards of at most 40 recipients, groups of about 60: several
			// groups, each a pass over the parts.
			f := newFixture(t, submit.Limits{ShardSplit: 40, PlanGroup: 60})
			ctx := context.Background()
			if err := f.st.PutSuppressions(ctx, "t1", []store.Suppression{{Account: "acct-a", To: "u7"}}); err != nil {
				t.Fatal(err)
			}
			job := f.stagedJob(t, "k1")
			// acct-a u0..u99 over three parts with overlaps; acct-b u0..u29
			// and u"q (an escaped recipient) as CSV, each with a duplicate
			// row.
			parts := []struct{ media, body string }{
				{submit.MediaNDJSON, ndjson("acct-a", 0, 50)},
				{submit.MediaJSON, `{"recipients":[` + strings.Join(strings.Split(strings.TrimSpace(ndjson("acct-a", 40, 100)), "\n"), ",") + `]}`},
				{submit.MediaCSV, "account,to,var.name\n" + csvRows("acct-b", 0, 30) + "acct-b,u3,again\nacct-b,\"u\"\"q\",Q\nacct-b,\"u\"\"q\",again\n"},
			}
			for i, p := range parts {
				if r, err := f.put(t, job, i+1, p.media, p.body); err != nil || !r.Created {
					t.Fatalf("PutPart(%d) = %+v, %v", i+1, r, err)
				}
			}
			v, err := f.sub.Start(ctx, job, 3)
			if err != nil || v.Job.Status != store.JobStarting {
				t.Fatalf("Start = %+v, %v", v.Job, err)
			}
			turns := f.drainPlans(t, crashAt)
			view, err := f.st.GetJob(ctx, job.ID)
			if err != nil {
				t.Fatal(err)
			}
			// 100 + 31 distinct, u7 of acct-a suppressed (or, after a
			// repeated group step, kept for the sender to skip).
			wantTotal, wantSupp := int64(130), int64(1)
			if view.Job.Total == 131 {
				wantTotal, wantSupp = 131, 0
			}
			if view.Job.Status != store.JobRunning || view.Job.Total != wantTotal || view.Job.Suppressed != wantSupp ||
				view.Counts().Pending != wantTotal || turns != len(view.Shards) {
				t.Fatalf("planned job = %+v, %d shards, counts %+v, %d turns enqueued", view.Job, len(view.Shards), view.Counts(), turns)
			}
			if len(view.Shards) != 4 { // acct-a: 3 shards of ≤ 40, acct-b: 1
				t.Fatalf("%d shards, want 4", len(view.Shards))
			}
			seen := map[string]bool{}
			cursor := ""
			for {
				page, err := f.st.ListItems(ctx, store.ListItemsParams{JobID: job.ID, Cursor: cursor, Limit: 1000})
				if err != nil {
					t.Fatal(err)
				}
				for _, it := range page.Items {
					k := it.Account + "/" + it.To
					if seen[k] {
						t.Fatalf("recipient %s has two items", k)
					}
					seen[k] = true
					if it.Account == "acct-a" && (it.Ref != "r"+strings.TrimPrefix(it.To, "u") || it.Vars["name"] != "N"+strings.TrimPrefix(it.To, "u")) {
						t.Fatalf("item %+v lost its ref or vars", it)
					}
				}
				if cursor = page.NextCursor; cursor == "" {
					break
				}
			}
			if int64(len(seen)) != wantTotal || (wantSupp == 1 && seen["acct-a/u7"]) || !seen[`acct-b/u"q`] {
				t.Fatalf("%d distinct items (u7 kept: %v), want %d", len(seen), seen["acct-a/u7"], wantTotal)
			}
			if parts, err := f.st.ListParts(ctx, job.ID); err != nil || len(parts) != 0 {
				t.Fatalf("parts after release = %v, %v; want deleted", parts, err)
			}
		})
	}
}

func csvRows(account string, from, to int) string {
	var b strings.Builder
	for i := from; i < to; i++ {
		fmt.Fprintf(&b, "%s,u%d,N%d\n", account, i, i)
	}
	return b.String()
}

func TestStagedPartsRefuseBadInput(t *testing.T) {
	t.Parallel()
	f := newFixture(t, submit.Limits{})
	ctx := context.Background()
	job := f.stagedJob(t, "k2")
	if _, err := f.put(t, job, 1, submit.MediaNDJSON, ndjson("acct-a", 0, 3)); err != nil {
		t.Fatal(err)
	}
	if r, err := f.put(t, job, 1, submit.MediaNDJSON, ndjson("acct-a", 0, 3)); err != nil || r.Created {
		t.Fatalf("same part again = %+v, %v; want the stored part", r, err)
	}
	if _, err := f.put(t, job, 1, submit.MediaNDJSON, ndjson("acct-a", 0, 4)); !errors.Is(err, submit.ErrPartConflict) {
		t.Fatalf("other body: %v, want ErrPartConflict", err)
	}
	tests := []struct {
		name, media, body, field, msg string
	}{
		{"bad JSON line", submit.MediaNDJSON, ndjson("acct-a", 0, 2) + "{\"account\": \n", "line 3", "not a recipient"},
		{"unknown field", submit.MediaNDJSON, `{"account":"acct-a","to":"x","vars":{"name":"n"},"phone":1}` + "\n", "line 1", "unknown field"},
		{"unknown account", submit.MediaNDJSON, "\n" + ndjson("acct-zz", 0, 1), "line 2.account", "unknown account"},
		{"missing variable", submit.MediaCSV, "account,to\nacct-a,u1\n", "line 2.vars.name", "no variable"},
		{"bad CSV header", submit.MediaCSV, "to,account\nu1,acct-a\n", "line 1", "account,to"},
		{"bad CSV column", submit.MediaCSV, "account,to,name\nacct-a,u1,x\n", "line 1", "not ref or var"},
		{"short CSV row", submit.MediaCSV, "account,to,var.name\nacct-a,u1,x\nacct-a\n", "line 3", "number of fields"},
		{"JSON index", submit.MediaJSON, `{"recipients":[{"account":"acct-a","to":"u1","vars":{"name":"x"}},{"account":"acct-a","to":""}]}`, "recipients[1].to", "required"},
		{"empty", submit.MediaNDJSON, "\n\n", "recipients", "no recipients"},
	}
	for i, tc := range tests {
		_, err := f.put(t, job, 10+i, tc.media, tc.body)
		var verr *submit.ValidationError
		if !errors.As(err, &verr) || verr.Errors[0].Field != tc.field || !strings.Contains(verr.Errors[0].Message, tc.msg) {
			t.Errorf("%s: %v; want %s: …%s…", tc.name, err, tc.field, tc.msg)
		}
	}
	if parts, _ := f.st.ListParts(ctx, job.ID); len(parts) != 1 {
		t.Fatalf("%d parts stored, want only the good one", len(parts))
	}
	// Start needs parts 1..N.
	var verr *submit.ValidationError
	if _, err := f.sub.Start(ctx, job, 2); !errors.As(err, &verr) || !strings.Contains(verr.Errors[0].Message, "parts 2 have not") {
		t.Fatalf("Start(2) with part 2 missing: %v", err)
	}
	if j, _ := f.st.GetJobRecord(ctx, job.ID); j.Status != store.JobStaging {
		t.Fatalf("job %s after a refused start; want staging", j.Status)
	}
}
