package main

import (
	"bytes"
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/qunfa/qunfa/internal/store"
)

// cutAll cuts a file into parts, copying each body.
func cutAll(t *testing.T, file, mediaType string, max int) ([]filePart, *partCutter, error) {
	t.Helper()
	c := newPartCutter(strings.NewReader(file), mediaType, max)
	var parts []filePart
	for {
		p, err := c.next()
		if errors.Is(err, io.EOF) {
			return parts, c, nil
		}
		if err != nil {
			return parts, c, err
		}
		p.Body = append([]byte(nil), p.Body...)
		parts = append(parts, p)
	}
}

func TestPartCutterCSV(t *testing.T) {
	header := "account,to,var.name\n"
	var b strings.Builder
	b.WriteString("\xef\xbb\xbf" + header)
	for i := 1; i <= 200; i++ {
		if i == 77 {
			b.WriteString("acct-a,u77,\"two\nlines, \"\"quoted\"\"\"\n") // lines 78-79 of the file
			continue
		}
		if i == 120 {
			b.WriteString("\n") // a blank line
		}
		fmt.Fprintf(&b, "acct-a,u%d,N%d\n", i, i)
	}
	b.WriteString("acct-b,last,no newline")
	file := b.String()
	parts, cut, err := cutAll(t, file, formatCSV, 256)
	if err != nil {
		t.Fatal(err)
	}
	if len(parts) < 10 {
		t.Fatalf("%d parts of at most 256 bytes for %d bytes", len(parts), len(file))
	}
	var all [][]string
	var covered int64
	for i, p := range parts {
		if p.Number != i+1 || len(p.Body) > 256 || !strings.HasPrefix(string(p.Body), header) {
			t.Fatalf("part %d: number %d, %d bytes, starts %q", i+1, p.Number, len(p.Body), p.Body[:min(len(p.Body), 30)])
		}
		covered += p.FileBytes
		r := csv.NewReader(bytes.NewReader(p.Body))
		recs, err := r.ReadAll()
		if err != nil {
			t.Fatalf("part %d is not CSV: %v\n%s", p.Number, err, p.Body)
		}
		all = append(all, recs[1:]...)
		// Line mapping: the part's line 2 is its first record's file line.
		first := recs[1]
		wantLine := 0
		for n, l := range strings.Split(file, "\n") {
			if strings.HasPrefix(l, first[0]+","+first[1]+",") {
				wantLine = n + 1
			}
		}
		if got := cut.fileLine(p, 2); got != wantLine {
			t.Errorf("part %d: part line 2 maps to file line %d, want %d (%q)", p.Number, got, wantLine, first)
		}
		if cut.fileField(p, "line 1") != "line 1" || cut.fileField(p, "recipients") != "recipients" {
			t.Errorf("header line or other fields rewritten")
		}
	}
	if covered != int64(len(file)) {
		t.Errorf("parts cover %d bytes of %d", covered, len(file))
	}
	if len(all) != 201 || all[76][2] != "two\nlines, \"quoted\"" || all[200][1] != "last" {
		t.Errorf("%d records; #77 %q; last %q", len(all), all[76], all[len(all)-1])
	}
}

func TestPartCutterNDJSON(t *testing.T) {
	var b strings.Builder
	for i := 1; i <= 100; i++ {
		fmt.Fprintf(&b, "{\"account\":\"acct-a\",\"to\":\"u%d\"}\n", i)
	}
	b.WriteString("\n\n")
	parts, cut, err := cutAll(t, b.String(), formatNDJSON, 200)
	if err != nil {
		t.Fatal(err)
	}
	lines := 0
	for _, p := range parts {
		if len(p.Body) > 200 || p.FirstLine != lines+1 {
			t.Errorf("part %d: %d bytes, first line %d after %d lines", p.Number, len(p.Body), p.FirstLine, lines)
		}
		n := len(bytes.Split(bytes.TrimSpace(p.Body), []byte("\n")))
		if want := fmt.Sprintf("\"u%d\"", cut.fileLine(p, n)); !bytes.Contains(p.Body, []byte(want)) {
			t.Errorf("part %d: its line %d is not file line %d", p.Number, n, cut.fileLine(p, n))
		}
		lines += n
	}
	if lines != 100 {
		t.Errorf("%d recipient lines in parts; the trailing blank lines make no part", lines)
	}

	// A record larger than a part, an unclosed quote, an empty CSV.
	long := "{\"account\":\"acct-a\",\"to\":\"" + strings.Repeat("x", 300) + "\"}\n"
	_, _, err = cutAll(t, "{}\n"+long, formatNDJSON, 200)
	var le *lineError
	if !errors.As(err, &le) || le.line != 2 {
		t.Errorf("long record: %v", err)
	}
	_, _, err = cutAll(t, "account,to\nacct-a,\"open\n", formatCSV, 200)
	if !errors.As(err, &le) || le.line != 2 || !strings.Contains(le.msg, "quoted") {
		t.Errorf("unclosed quote: %v", err)
	}
	_, _, err = cutAll(t, "", formatCSV, 200)
	if !errors.As(err, &le) || !strings.Contains(le.msg, "header") {
		t.Errorf("empty CSV: %v", err)
	}
}

// endless is a CSV file of n recipients made as it is read.
type endless struct {
	n, i int
	buf  []byte
}

func (e *endless) Read(p []byte) (int, error) {
	for len(e.buf) < len(p) && e.i <= e.n {
		if e.i == 0 {
			e.buf = append(e.buf, "account,to,var.name\n"...)
		} else {
			e.buf = fmt.Appendf(e.buf, "acct-a,user-%08d,Name %d\n", e.i, e.i)
		}
		e.i++
	}
	if len(e.buf) == 0 {
		return 0, io.EOF
	}
	n := copy(p, e.buf)
	e.buf = e.buf[:copy(e.buf, e.buf[n:])]
	return n, nil
}

// The cutter holds one part and one record whatever the file's size.
func TestPartCutterConstantMemory(t *testing.T) {
	const max = 64 << 10
	c := newPartCutter(&endless{n: 500_000}, formatCSV, max) // about 20 MB
	parts, last := 0, 0
	for {
		p, err := c.next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		parts++
		last = c.fileLine(p, bytes.Count(p.Body, []byte("\n")))
		if cap(c.part) > 2*max || cap(c.pend) > 2*max {
			t.Fatalf("part %d: buffers grew to %d and %d bytes", p.Number, cap(c.part), cap(c.pend))
		}
	}
	if parts < 250 || last != 500_001 {
		t.Errorf("%d parts, last line %d", parts, last)
	}
}

// putCounter counts part uploads by number and can fail some.
type putCounter struct {
	mu   sync.Mutex
	puts map[string]int
	fail func(path string) bool
}

func (p *putCounter) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPut && strings.Contains(r.URL.Path, "/recipients/") {
			p.mu.Lock()
			p.puts[r.URL.Path]++
			fail := p.fail != nil && p.fail(r.URL.Path)
			p.mu.Unlock()
			if fail {
				http.Error(w, "upstream unavailable", http.StatusBadGateway)
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

func (p *putCounter) total() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, c := range p.puts {
		n += c
	}
	return n
}

func csvRecipients(n int) string {
	var b strings.Builder
	b.WriteString("account,to,var.name\n")
	for i := 1; i <= n; i++ {
		acct := "acct-a"
		if i%3 == 0 {
			acct = "acct-b"
		}
		fmt.Fprintf(&b, "%s,user-%d,Name %d\n", acct, i, i)
	}
	return b.String()
}

func TestSubmitRecipientsResumes(t *testing.T) {
	uploadRetryWait = 0
	pc := &putCounter{puts: map[string]int{}}
	srv := newAPIServerWrapped(t, pc.wrap)
	ctx := context.Background()
	file := writeFile(t, "people.csv", csvRecipients(300))
	args := []string{"submit", "--name", "big", "--template", "Hi {{name}}", "--recipients", file, "--key", "big-1", "--part-size", "1024"}

	// The first run is cut short: part 4 and after fail (the server is down).
	pc.fail = func(path string) bool {
		return !strings.HasSuffix(path, "/1") && !strings.HasSuffix(path, "/2") && !strings.HasSuffix(path, "/3")
	}
	r := runCLI(ctx, srv, "", args...)
	r.want(t, 1, nil, []string{"qunfa submit: Bad Gateway (HTTP 502): upstream unavailable (part 4, lines ", "run again with --key big-1 to resume"})
	if r.stdout != "" {
		t.Errorf("a job id was printed for an upload cut short: %q", r.stdout)
	}
	if pc.puts[pc.path(t, srv, "big-1", 4)] != uploadAttempts {
		t.Errorf("part 4 tried %d times, want %d", pc.puts[pc.path(t, srv, "big-1", 4)], uploadAttempts)
	}

	// Run again with the key: parts 1-3 are not uploaded again.
	pc.fail = nil
	before := pc.total()
	r = runCLI(ctx, srv, "", args...)
	r.want(t, 0, nil, []string{"300 recipients in", "3 already there"})
	id := strings.TrimSpace(r.stdout)
	j, err := srv.store.GetJob(ctx, id)
	if err != nil || j.Job.Status != store.JobStarting {
		t.Fatalf("job %q: %v %+v", id, err, j.Job)
	}
	parts, err := srv.store.ListParts(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	recipients := 0
	for _, p := range parts {
		recipients += p.Recipients
		if p.Bytes > 1024 {
			t.Errorf("part %d has %d bytes", p.Number, p.Bytes)
		}
	}
	if recipients != 300 || pc.total()-before != len(parts)-3 {
		t.Errorf("%d recipients in %d parts; %d uploads on resume", recipients, len(parts), pc.total()-before)
	}
	for _, p := range []int{1, 2, 3} {
		if n := pc.puts[pc.path(t, srv, "big-1", p)]; n != 1 {
			t.Errorf("part %d uploaded %d times", p, n)
		}
	}

	// A third run finds the job started and uploads nothing.
	before = pc.total()
	runCLI(ctx, srv, "", args...).want(t, 0, []string{id}, []string{"was started before", "starting"})
	if pc.total() != before {
		t.Error("a started job's parts were uploaded again")
	}
}

// path is the URL path of a part of the job of a key.
func (p *putCounter) path(t *testing.T, srv *apiServer, key string, part int) string {
	t.Helper()
	return fmt.Sprintf("/v1/jobs/%s/recipients/%d", jobByKey(t, srv, key).ID, part)
}

// jobByKey finds the job of an idempotency key.
func jobByKey(t *testing.T, srv *apiServer, key string) store.Job {
	t.Helper()
	res, err := srv.store.ListJobs(context.Background(), store.ListJobsParams{Tenant: "tenant-a", Limit: 200})
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range res.Jobs {
		if j.IdempotencyKey == key {
			return j
		}
	}
	t.Fatalf("no job with key %s", key)
	return store.Job{}
}

func TestSubmitRecipientsErrors(t *testing.T) {
	uploadRetryWait = 0
	srv := newAPIServer(t)
	ctx := context.Background()

	// A bad line in part 3 of an NDJSON file: reported at its file line,
	// and nothing starts.
	var b strings.Builder
	for i := 1; i <= 60; i++ {
		acct := "acct-a"
		if i == 57 {
			acct = "acct-nobody"
		}
		fmt.Fprintf(&b, "{\"account\": %q, \"to\": \"u%d\", \"vars\": {\"name\": \"N\"}}\n", acct, i)
	}
	nd := writeFile(t, "people.ndjson", b.String())
	r := runCLI(ctx, srv, "", "submit", "--template", "Hi {{name}}", "--recipients", nd, "--key", "nd-1", "--part-size", "1024")
	r.want(t, 1, nil, []string{"HTTP 422", nd + ` line 57.account: unknown account "acct-nobody"`, "nothing was started", "--key nd-1"})
	if strings.Count(r.stderr, ".ndjson line ") != 1 {
		t.Errorf("more than the one bad line reported:\n%s", r.stderr)
	}
	j := jobByKey(t, srv, "nd-1")
	if j.Status != store.JobStaging {
		t.Fatalf("job after a bad line: %+v", j)
	}

	// Fixed and run again with the key: the parts before the bad one stay,
	// the rest go up, the job starts.
	fixed := writeFile(t, "people.ndjson", strings.Replace(b.String(), "acct-nobody", "acct-b", 1))
	runCLI(ctx, srv, "", "submit", "--template", "Hi {{name}}", "--recipients", fixed, "--key", "nd-1", "--part-size", "1024").
		want(t, 0, []string{j.ID}, []string{"60 recipients", "already there"})

	// The same key with another file: refused, readably.
	other := writeFile(t, "people.ndjson", strings.Replace(b.String(), "u1\"", "someone-else\"", 1))
	r = runCLI(ctx, srv, "", "submit", "--template", "Hi {{name}}", "--recipients", other, "--key", "cv-1", "--part-size", "1024")
	r.want(t, 1, nil, []string{"HTTP 422"}) // line 57 is still bad in this one
	other = writeFile(t, "people.ndjson", strings.Replace(b.String(), "acct-nobody", "acct-a", 1))
	r = runCLI(ctx, srv, "", "submit", "--template", "Hi {{name}}", "--recipients", other, "--key", "cv-1", "--part-size", "1024")
	r.want(t, 1, nil, []string{"uploaded from another file", "new --key"})

	// A CSV header error is reported at line 1 of the file; a record too
	// long for a part, at its line.
	bad := writeFile(t, "bad.csv", "acct,to\nacct-a,u1\n")
	runCLI(ctx, srv, "", "submit", "--template", "Hi", "--recipients", bad).
		want(t, 1, nil, []string{"idempotency key cli-", bad + " line 1: the header row must begin with account,to"})
	long := writeFile(t, "long.csv", "account,to\nacct-a,u1\nacct-a,"+strings.Repeat("x", 200)+"\n")
	runCLI(ctx, srv, "", "submit", "--template", "Hi", "--recipients", long, "--part-size", "100").
		want(t, 1, nil, []string{"line 3: a record of more than 100 bytes"})

	// Wrong command lines.
	runCLI(ctx, srv, "", "submit", "--template", "Hi", "--recipients", writeFile(t, "x.txt", "a")).want(t, 2, nil, []string{".csv", ".ndjson"})
	runCLI(ctx, srv, "", "submit", "--recipients", bad).want(t, 2, nil, []string{"--template is required"})
	runCLI(ctx, srv, "", "submit", "--template", "Hi", "--recipients", bad, "--part-size", "5000000").want(t, 2, nil, []string{"--part-size"})
	runCLI(ctx, srv, "", "submit", "--template", "Hi", writeJobFile(t, jobFile)).want(t, 2, nil, []string{"--name and --template go with --recipients"})
	runCLI(ctx, srv, "", "submit", "--template", "Hi", "--recipients", filepath.Join(t.TempDir(), "none.csv")).want(t, 1, nil, []string{"no such file"})
}

// On a terminal, submit --recipients draws a progress bar on stderr and
// prints only the job id on stdout.
func TestSubmitRecipientsProgressBar(t *testing.T) {
	srv := newAPIServer(t)
	file := writeFile(t, "people.csv", csvRecipients(100))
	var errb, out syncBuffer
	yes := true
	c := &cli{stdout: &out, stderr: &errb, terminal: &yes,
		getenv: func(k string) string { return map[string]string{"QUNFA_API_TOKEN": testToken, "QUNFA_URL": srv.url}[k] }}
	if code := c.run(context.Background(), []string{"submit", "--template", "Hi {{name}}", "--recipients", file, "--key", "bar", "--part-size", "512"}); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	if !strings.Contains(errb.String(), "people.csv") || !strings.Contains(errb.String(), "100 %") || strings.Contains(errb.String(), "part 1 (") {
		t.Errorf("no progress bar on stderr:\n%s", errb.String())
	}
	if id := strings.TrimSpace(out.String()); !strings.HasPrefix(id, "j") || strings.Contains(id, " ") {
		t.Errorf("stdout %q is not a job id", out.String())
	}
}

// FuzzPartCutter: any file is cut into parts within the size, covering
// the file exactly, or refused at a line.
func FuzzPartCutter(f *testing.F) {
	f.Add("account,to\nacct-a,u1\n", true, 64)
	f.Add("account,to,var.x\n\"a\nb\",u1,\"\"\"\"\n\n", true, 80)
	f.Add("{\"account\":\"a\",\"to\":\"b\"}\n\n{}", false, 64)
	f.Fuzz(func(t *testing.T, file string, isCSV bool, max int) {
		max = minPartBytes + abs(max)%512
		mt := formatNDJSON
		if isCSV {
			mt = formatCSV
		}
		parts, _, err := cutAll(t, file, mt, max)
		var le *lineError
		if err != nil {
			if !errors.As(err, &le) || le.line < 1 {
				t.Fatalf("error %v", err)
			}
			return
		}
		var covered int64
		for _, p := range parts {
			if len(p.Body) > max || p.FirstLine < 1 || p.LastLine < p.FirstLine {
				t.Fatalf("part %d: %d bytes (max %d), lines %d-%d", p.Number, len(p.Body), max, p.FirstLine, p.LastLine)
			}
			covered += p.FileBytes
		}
		if len(parts) > 0 && len(strings.TrimSpace(strings.TrimPrefix(file, "\xef\xbb\xbf"))) > 0 && covered > int64(len(file)) {
			t.Fatalf("parts cover %d bytes of %d", covered, len(file))
		}
	})
}

func abs(n int) int {
	if n < 0 {
		return -n
	}
	return n
}
