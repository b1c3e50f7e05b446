package main

import (
	"context"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/qunfa/qunfa/apiclient"
	"github.com/qunfa/qunfa/internal/store"
)

// jobCount is how many jobs the test tenant has.
func jobCount(t *testing.T, srv *apiServer) int {
	t.Helper()
	res, err := srv.store.ListJobs(context.Background(), store.ListJobsParams{Tenant: "tenant-a", Limit: 200})
	if err != nil {
		t.Fatal(err)
	}
	return len(res.Jobs)
}

func TestSubmitPreview(t *testing.T) {
	uploadRetryWait = 0
	srv := newAPIServer(t)
	ctx := context.Background()
	file := writeJobFile(t, jobFile)

	t.Run("a job file is previewed and nothing is created", func(t *testing.T) {
		r := runCLI(ctx, srv, "", "submit", "--preview", file)
		r.want(t, 0, []string{
			"preview: 3 recipients would be sent to",
			"dropped: 0 duplicate, 0 suppressed, 0 frequency capped",
			"largest message: 7 bytes",
			"ACCOUNT", "acct-a", "10/s",
			"samples (first 3):", "acct-a → u1: Hi Li", "acct-b → u3: Hi Zhao",
			"nothing was sent",
		}, nil)
		if n := jobCount(t, srv); n != 0 {
			t.Errorf("a preview created %d jobs", n)
		}
		dup := `{"template": "Hi", "recipients": [{"account": "acct-a", "to": "u1"}, {"account": "acct-a", "to": "u1"}]}`
		runCLI(ctx, srv, "", "submit", "--preview", writeJobFile(t, dup)).want(t, 0, []string{"1 recipients would", "1 duplicate"}, nil)

		r = runCLI(ctx, srv, "", "submit", "--preview", "--output", "json", file)
		var pv apiclient.JobPreview
		jsonOut(t, r, &pv)
		if pv.Total != 3 || len(pv.ByAccount) != 2 || len(pv.Samples) != 3 {
			t.Errorf("json preview: %+v", pv)
		}
		if n := jobCount(t, srv); n != 0 {
			t.Errorf("a preview created %d jobs", n)
		}
	})
	t.Run("a refused job is refused by the preview too", func(t *testing.T) {
		bad := writeJobFile(t, `{"template": "Hi", "recipients": [{"account": "acct-zz", "to": "u1"}]}`)
		runCLI(ctx, srv, "", "submit", "--preview", bad).want(t, 1, nil, []string{"(HTTP 422)", "recipients[0].account"})
	})
	t.Run("staged: uploaded, previewed, not started", func(t *testing.T) {
		csv := writeFile(t, "people.csv", csvRecipients(30))
		args := []string{"submit", "--template", "Hi {{name}}", "--recipients", csv, "--key", "pv-1", "--canary", "5"}
		r := runCLI(ctx, srv, "", append(args, "--preview")...)
		r.want(t, 0, []string{"preview: 30 recipients", "acct-a", "acct-b", "Hi Name 1", "stays staging", "nothing was sent or started",
			"without --preview, with --key pv-1"}, nil)
		j := jobByKey(t, srv, "pv-1")
		if j.Status != store.JobStaging || j.Canary != 5 {
			t.Fatalf("after a staged preview the job is %s with canary %d", j.Status, j.Canary)
		}
		if !strings.Contains(r.stdout, j.ID) {
			t.Errorf("the staging job id %s is not printed:\n%s", j.ID, r.stdout)
		}
		// The same command without --preview starts it; the parts are there.
		runCLI(ctx, srv, "", args...).want(t, 0, []string{j.ID}, []string{"30 recipients", "already there"})
		if j := jobByKey(t, srv, "pv-1"); j.Status == store.JobStaging {
			t.Error("the job did not start")
		}
		// Once started, there is nothing to preview.
		runCLI(ctx, srv, "", append(args, "--preview")...).want(t, 1, nil, []string{"was started before with key pv-1", "nothing to preview"})
	})
	t.Run("canary flags set the job's canary", func(t *testing.T) {
		id := submitted(t, srv, "--canary", "2", file)
		v, err := srv.store.GetJob(ctx, id)
		if err != nil || v.Job.Canary != 2 {
			t.Errorf("--canary 2: canary %d %v", v.Job.Canary, err)
		}
		id = submitted(t, srv, "--canary-percent", "50", file)
		if v, err = srv.store.GetJob(ctx, id); err != nil || v.Job.Canary != 2 {
			t.Errorf("--canary-percent 50 of 3: canary %d %v", v.Job.Canary, err)
		}
	})
	t.Run("bad combinations are usage errors", func(t *testing.T) {
		csv := writeFile(t, "p.csv", csvRecipients(3))
		withCanary := writeJobFile(t, `{"template": "Hi", "canary": {"count": 1}, "recipients": [{"account": "acct-a", "to": "u1"}]}`)
		before := jobCount(t, srv)
		for _, c := range []struct {
			args []string
			want string
		}{
			{[]string{"--canary", "1", "--canary-percent", "5", file}, "give one of them"},
			{[]string{"--canary", "0", file}, "--canary must be at least 1"},
			{[]string{"--canary-percent", "150", file}, "--canary-percent must be"},
			{[]string{"--template", "Hi", "--recipients", csv, "--canary-percent", "5"}, "does not go with --recipients"},
			{[]string{"--output", "json", file}, "--output goes with --preview"},
			{[]string{"--preview", "--output", "yaml", file}, "--output must be table or json"},
			{[]string{"--canary", "1", withCanary}, "has its own canary"},
		} {
			runCLI(ctx, srv, "", append([]string{"submit"}, c.args...)...).want(t, 2, nil, []string{c.want})
		}
		if n := jobCount(t, srv); n != before {
			t.Errorf("refused flags created %d jobs", n-before)
		}
	})
}

// A job's canary shows in status and watch: its results and, while the
// job waits for approval, the commands to approve or stop it; then its
// results as they were at approval.
func TestCanaryShown(t *testing.T) {
	srv := newAPIServer(t)
	ctx := context.Background()
	id := submitted(t, srv, "--canary", "3", "-")

	runCLI(ctx, srv, "", "status", id).want(t, 0, []string{"  canary: 0 done of 3 — 0 confirmed, 0 failed; sending"}, nil)

	// The canary is sent (one failure per shard) and the job pauses for it.
	settle(t, srv, id, true)
	if _, err := srv.store.TransitionJob(ctx, store.TransitionJobParams{JobID: id, To: store.JobPaused,
		PauseReason: store.PauseCanary, At: srv.clock.Now()}); err != nil {
		t.Fatal(err)
	}
	waiting := "canary: 3 done of 3 — 1 confirmed, 2 failed; waiting for approval: qunfa resume " + id + " (approve) or qunfa cancel " + id
	runCLI(ctx, srv, "", "status", id).want(t, 0, []string{"paused (canary)", "  " + waiting}, nil)

	out := &syncBuffer{}
	done := make(chan result, 1)
	go func() { done <- runCLIOut(ctx, srv, "", out, "watch", id) }()
	for deadline := time.Now().Add(30 * time.Second); !strings.Contains(out.String(), waiting); {
		if time.Now().After(deadline) {
			t.Fatalf("watch never showed the canary waiting: %s", out.String())
		}
		runtime.Gosched()
	}
	runCLI(ctx, srv, "", "resume", id).want(t, 0, []string{id + " ", "; canary approved (1 confirmed, 2 failed)\n"}, nil)
	select {
	case r := <-done:
		r.want(t, 0, []string{"job " + id + " partial", "\ncanary: approved (1 confirmed, 2 failed)\n"}, nil)
	case <-time.After(30 * time.Second):
		t.Fatal("watch did not end when the approved job finished")
	}
	runCLI(ctx, srv, "", "status", id).want(t, 0, []string{"  canary: approved (1 confirmed, 2 failed)"}, nil)

	// On a terminal the bars carry the canary line too.
	var tout, terr syncBuffer
	yes := true
	c := &cli{stdout: &tout, stderr: &terr, terminal: &yes, pollEvery: time.Millisecond,
		getenv: func(k string) string { return map[string]string{"QUNFA_URL": srv.url, "QUNFA_API_TOKEN": testToken}[k] }}
	if code := c.run(ctx, []string{"watch", id}); code != 0 || !strings.Contains(tout.String(), "canary: approved") {
		t.Errorf("bars: exit %d, %s\n%s", code, terr.String(), tout.String())
	}

	// A job without a canary shows no canary line.
	plain := submitted(t, srv, "-")
	if r := runCLI(ctx, srv, "", "status", plain); strings.Contains(r.stdout, "canary") {
		t.Errorf("a job without a canary shows one:\n%s", r.stdout)
	}
}
