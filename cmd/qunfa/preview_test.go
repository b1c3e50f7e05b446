package main

import (
	"context"
	"strings"
	"testing"

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
