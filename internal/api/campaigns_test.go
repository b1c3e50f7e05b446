package api_test

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/api"
	"github.com/qunfa/qunfa/internal/store"
)

// recordingScheduler is a campaign.Scheduler that records what it is told
// and can be made to fail.
type recordingScheduler struct {
	mu     sync.Mutex
	rules  map[string]store.Campaign // tenant/id
	failOn string                    // campaign id whose Upsert fails
}

func (r *recordingScheduler) Upsert(_ context.Context, c store.Campaign) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if c.ID == r.failOn {
		return errors.New("eventbridge unavailable")
	}
	r.rules[c.Tenant+"/"+c.ID] = c
	return nil
}

func (r *recordingScheduler) Delete(_ context.Context, tenant, id string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.rules, tenant+"/"+id)
	return nil
}

// TestCampaigns: create, replace (history kept), tenant scoping, the
// scheduler kept in step, and a failed schedule stores nothing.
func TestCampaigns(t *testing.T) {
	sched := &recordingScheduler{rules: map[string]store.Campaign{}, failOn: "broken"}
	s := newStack(t, func(d *api.Deps) { d.Scheduler = sched })
	body := `{"id": "weekly", "name": "Weekly", "schedule": "cron(0 9 ? * MON *)", "mode": "snapshot",
		"request": {"template": "Hi {{name}}", "recipients": [{"account": "acct-a", "to": "u1", "vars": {"name": "Li"}}]}}`
	r := s.do("POST", "/v1/campaigns", tokenA, body)
	var c api.Campaign
	r.json(t, &c)
	if r.status != http.StatusCreated || r.header.Get("Location") != "/v1/campaigns/weekly" || !c.Enabled ||
		c.NextFireAt == nil || !c.NextFireAt.Equal(time.Date(2025, 3, 3, 9, 0, 0, 0, time.UTC)) {
		t.Fatalf("create: %d %+v", r.status, c)
	}
	if got := sched.rules["tenant-a/weekly"]; got.Schedule != "cron(0 9 ? * MON *)" || !got.Enabled {
		t.Errorf("scheduler got %+v", got)
	}
	// A firing happened; replacing keeps it.
	stored, _ := s.store.GetCampaign(context.Background(), "tenant-a", "weekly")
	stored.LastFiredAt = time.Date(2025, 3, 3, 9, 0, 0, 0, time.UTC)
	if _, err := s.store.PutCampaign(context.Background(), stored); err != nil {
		t.Fatal(err)
	}
	s.clock.Advance(time.Hour)
	r = s.do("POST", "/v1/campaigns", tokenA, strings.Replace(body, `"mode"`, `"enabled": false, "mode"`, 1))
	r.json(t, &c)
	if r.status != http.StatusOK || c.Enabled || c.NextFireAt != nil || c.LastFiredAt == nil || c.CreatedAt.Equal(c.UpdatedAt) {
		t.Fatalf("replace: %d %+v", r.status, c)
	}
	if sched.rules["tenant-a/weekly"].Enabled {
		t.Errorf("the rule was not disabled")
	}
	// Tenant B sees none of it and cannot delete it.
	if r := s.do("GET", "/v1/campaigns/weekly", tokenB, nil); r.status != http.StatusNotFound {
		t.Errorf("tenant B read: %d", r.status)
	}
	if r := s.do("DELETE", "/v1/campaigns/weekly", tokenB, nil); r.status != http.StatusNotFound {
		t.Errorf("tenant B delete: %d", r.status)
	}
	var list api.CampaignList
	s.do("GET", "/v1/campaigns", tokenB, nil).json(t, &list)
	if len(list.Campaigns) != 0 {
		t.Errorf("tenant B lists %+v", list)
	}
	// A provider account has one owner: tenant B cannot name tenant A's
	// account. With its own accounts, the same id is another campaign.
	wantProblem(t, s.do("POST", "/v1/campaigns", tokenB, body), http.StatusUnprocessableEntity)
	bodyB := strings.ReplaceAll(strings.ReplaceAll(body, `"acct-a"`, `"`+tenantBAccounts[0]+`"`), `"acct-b"`, `"`+tenantBAccounts[1]+`"`)
	if r := s.do("POST", "/v1/campaigns", tokenB, bodyB); r.status != http.StatusCreated {
		t.Errorf("tenant B create: %d %s", r.status, r.body)
	}
	// Validation names the fields; nothing stored or scheduled.
	r = s.do("POST", "/v1/campaigns", tokenA, `{"id": "bad id", "name": "x", "schedule": "rate(2 hour)", "mode": "requery",
		"source": "http://crm.example/", "max_delay_sec": -5, "request": {"template": "Hi {{name}}", "recipients": [{"account": "acct-a", "to": "u"}]}}`)
	p := wantProblem(t, r, http.StatusUnprocessableEntity)
	var fields []string
	for _, e := range p.Errors {
		fields = append(fields, e.Field)
	}
	if strings.Join(fields, ",") != "id,schedule,max_delay_sec,source,request.recipients,request.recipients[0].vars.name" {
		t.Errorf("fields %v (%+v)", fields, p)
	}
	// The schedule cannot be set: the campaign is not kept.
	r = s.do("POST", "/v1/campaigns", tokenA, strings.Replace(body, `"weekly"`, `"broken"`, 1))
	wantProblem(t, r, http.StatusInternalServerError)
	if _, err := s.store.GetCampaign(context.Background(), "tenant-a", "broken"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("a campaign without a schedule was kept: %v", err)
	}
	// Delete removes the rule too.
	if r := s.do("DELETE", "/v1/campaigns/weekly", tokenA, nil); r.status != http.StatusNoContent {
		t.Fatalf("delete: %d", r.status)
	}
	if _, ok := sched.rules["tenant-a/weekly"]; ok {
		t.Errorf("rule left after delete")
	}
	if _, ok := sched.rules["tenant-b/weekly"]; !ok {
		t.Errorf("tenant B's rule was deleted")
	}
}

// TestCampaignTimeZones (issue 14): a campaign's own time zone is stored,
// shown, handed to the scheduler and counts its next firing; without one
// the stack's zone counts; a zone Go does not know is a 422 on timezone
// that changes nothing.
func TestCampaignTimeZones(t *testing.T) {
	sched := &recordingScheduler{rules: map[string]store.Campaign{}}
	shanghai, err := time.LoadLocation("Asia/Shanghai")
	if err != nil {
		t.Fatal(err)
	}
	s := newStack(t, func(d *api.Deps) { d.Scheduler, d.CampaignZone = sched, shanghai })
	body := func(id, zone string) string {
		return `{"id": "` + id + `", "name": "Weekly", "schedule": "cron(0 9 ? * MON *)", "timezone": "` + zone + `", "mode": "snapshot",
		"request": {"template": "Hi", "recipients": [{"account": "acct-a", "to": "u1"}]}}`
	}
	for _, tc := range []struct {
		id, zone, effective string
		next                time.Time // Monday 2025-03-03, 09:00 in the zone
	}{
		{"ny", "America/New_York", "America/New_York", time.Date(2025, 3, 3, 14, 0, 0, 0, time.UTC)},
		{"stack", "", "Asia/Shanghai", time.Date(2025, 3, 3, 1, 0, 0, 0, time.UTC)},
		{"utc", "UTC", "UTC", time.Date(2025, 3, 3, 9, 0, 0, 0, time.UTC)},
	} {
		var c api.Campaign
		r := s.do("POST", "/v1/campaigns", tokenA, body(tc.id, tc.zone))
		r.json(t, &c)
		if r.status != http.StatusCreated || c.Timezone != tc.zone || c.EffectiveTimezone != tc.effective || c.NextFireAt == nil || !c.NextFireAt.Equal(tc.next) {
			t.Fatalf("create %s: %d %s", tc.id, r.status, r.body)
		}
		s.do("GET", "/v1/campaigns/"+tc.id, tokenA, nil).json(t, &c)
		if c.Timezone != tc.zone || c.EffectiveTimezone != tc.effective || c.NextFireAt == nil || !c.NextFireAt.Equal(tc.next) {
			t.Errorf("get %s: %+v", tc.id, c)
		}
		if got := sched.rules["tenant-a/"+tc.id]; got.Timezone != tc.zone {
			t.Errorf("scheduler got zone %q for %s, want %q", got.Timezone, tc.id, tc.zone)
		}
	}
	// The list tells the stack's default zone, the one the form's empty
	// timezone stands for.
	var list api.CampaignList
	s.do("GET", "/v1/campaigns", tokenA, nil).json(t, &list)
	if list.DefaultTimezone != "Asia/Shanghai" || len(list.Campaigns) != 3 || list.Campaigns[1].EffectiveTimezone != "Asia/Shanghai" {
		t.Errorf("list: default %q, campaigns %+v; want the stack's Asia/Shanghai", list.DefaultTimezone, list.Campaigns)
	}
	utc := newStack(t)
	utc.do("GET", "/v1/campaigns", tokenA, nil).json(t, &list)
	if list.DefaultTimezone != "UTC" {
		t.Errorf("a stack without a campaign zone shows default %q, want UTC", list.DefaultTimezone)
	}
	for _, bad := range []struct{ id, zone string }{{"mars", "Mars/Olympus"}, {"ny", "Local"}, {"ny", "EST5EDT/../../x"}} {
		p := wantProblem(t, s.do("POST", "/v1/campaigns", tokenA, body(bad.id, bad.zone)), http.StatusUnprocessableEntity)
		if len(p.Errors) != 1 || p.Errors[0].Field != "timezone" {
			t.Errorf("%q: errors %+v, want one on timezone", bad.zone, p.Errors)
		}
	}
	if _, err := s.store.GetCampaign(context.Background(), "tenant-a", "mars"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("a campaign with an unknown zone was stored: %v", err)
	}
	if c, err := s.store.GetCampaign(context.Background(), "tenant-a", "ny"); err != nil || c.Timezone != "America/New_York" ||
		sched.rules["tenant-a/ny"].Timezone != "America/New_York" {
		t.Errorf("a refused replace changed the campaign: %+v %v", c, err)
	}
}

// TestRequerySourceMustBePublic (issue 12, SSRF): a requery campaign whose
// source names a loopback, private, link-local or unique-local address, or
// a name that resolves to one, is refused when saved (422 on source) and
// not stored.
func TestRequerySourceMustBePublic(t *testing.T) {
	s := newStack(t, func(d *api.Deps) { d.Resolver = resolver{"loopy.example": "127.0.0.1", "crm.example": "93.184.215.14"} })
	for _, src := range []string{"https://127.0.0.1/r", "https://10.0.0.5/r", "https://169.254.169.254/latest", "https://[fc00::1]/r", "https://loopy.example/r"} {
		body := `{"id": "vips", "name": "vips", "schedule": "rate(1 hour)", "mode": "requery", "source": "` + src + `",
			"request": {"template": "Hi {{name}}"}}`
		p := wantProblem(t, s.do("POST", "/v1/campaigns", tokenA, body), http.StatusUnprocessableEntity)
		if len(p.Errors) != 1 || p.Errors[0].Field != "source" {
			t.Errorf("source %s: %+v", src, p)
		}
	}
	if _, err := s.store.GetCampaign(context.Background(), "tenant-a", "vips"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("a refused campaign was stored: %v", err)
	}
	ok := `{"id": "vips", "name": "vips", "schedule": "rate(1 hour)", "mode": "requery", "source": "https://crm.example/r?token=s3cret",
		"request": {"template": "Hi {{name}}"}}`
	if r := s.do("POST", "/v1/campaigns", tokenA, ok); r.status != http.StatusCreated {
		t.Fatalf("a public source: %d %s", r.status, r.body)
	}
}

// TestCampaignMetadata: DESIGN says campaigns take "metadata"; a campaign
// POSTed with request.metadata shows it back: in the answer, on GET and
// in the list.
func TestCampaignMetadata(t *testing.T) {
	s := newStack(t)
	body := `{"id": "weekly", "name": "Weekly", "schedule": "cron(0 9 ? * MON *)", "mode": "snapshot",
		"request": {"template": "Hi", "metadata": {"order": "A-1", "team": "growth"}, "recipients": [{"account": "acct-a", "to": "u1"}]}}`
	want := map[string]string{"order": "A-1", "team": "growth"}
	metadata := func(what string, c api.Campaign) {
		t.Helper()
		var req struct {
			Metadata map[string]string `json:"metadata"`
		}
		if err := json.Unmarshal(c.Request, &req); err != nil {
			t.Fatalf("%s: request %s: %v", what, c.Request, err)
		}
		if !maps.Equal(req.Metadata, want) {
			t.Errorf("%s: request.metadata %v, want %v (request %s)", what, req.Metadata, want, c.Request)
		}
	}
	var c api.Campaign
	r := s.do("POST", "/v1/campaigns", tokenA, body)
	r.json(t, &c)
	if r.status != http.StatusCreated {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	metadata("POST", c)
	c = api.Campaign{}
	r = s.do("GET", "/v1/campaigns/weekly", tokenA, nil)
	r.json(t, &c)
	if r.status != http.StatusOK {
		t.Fatalf("get: %d %s", r.status, r.body)
	}
	metadata("GET", c)
	var list api.CampaignList
	s.do("GET", "/v1/campaigns", tokenA, nil).json(t, &list)
	if len(list.Campaigns) != 1 {
		t.Fatalf("list: %+v", list)
	}
	metadata("list", list.Campaigns[0])
}
