package storetest

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/store"
)

// testAudit: entries listed newest first per tenant and per job, paged
// without gaps or repeats; appending the same entry twice keeps one.
func testAudit(t *testing.T, s store.Store, _ Capabilities) {
	as, ok := s.(store.AuditStore)
	if !ok {
		t.Fatalf("%T does not implement store.AuditStore", s)
	}
	ctx := ctxOf(t)
	var want []string
	for i := range 7 {
		e := store.AuditEntry{Tenant: "tenant-a", ID: fmt.Sprintf("e%02d", i), At: at(time.Duration(i/2) * time.Second),
			TokenID: "tok_1", TokenName: "ops", Role: store.RoleOperate, Method: "POST", Route: "POST /v1/jobs/{id}/pause",
			Path: "/v1/jobs/j1/pause", Status: 200}
		if i%2 == 0 {
			e.JobID = "j1"
		}
		if err := as.AppendAudit(ctx, e); err != nil {
			t.Fatalf("AppendAudit: %v", err)
		}
		if err := as.AppendAudit(ctx, e); err != nil {
			t.Fatalf("AppendAudit(again): %v", err)
		}
		want = append([]string{e.ID}, want...)
	}
	if err := as.AppendAudit(ctx, store.AuditEntry{Tenant: "tenant-b", ID: "b1", At: at(time.Second), Method: "PUT"}); err != nil {
		t.Fatal(err)
	}
	var got []string
	cursor := ""
	for pages := 0; ; pages++ {
		res, err := as.ListAudit(ctx, store.ListAuditParams{Tenant: "tenant-a", Cursor: cursor, Limit: 3})
		if err != nil {
			t.Fatalf("ListAudit: %v", err)
		}
		for _, e := range res.Entries {
			got = append(got, e.ID)
			if e.Tenant != "tenant-a" || e.Role != store.RoleOperate || e.Status != 200 || e.TokenName != "ops" || e.Route == "" {
				t.Fatalf("entry %+v", e)
			}
		}
		if res.NextCursor == "" || pages > 5 {
			break
		}
		cursor = res.NextCursor
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("ListAudit newest first = %v, want %v", got, want)
	}
	res, err := as.ListAudit(ctx, store.ListAuditParams{Tenant: "tenant-a", JobID: "j1"})
	if err != nil || len(res.Entries) != 4 || res.Entries[0].ID != "e06" || res.Entries[3].ID != "e00" {
		t.Fatalf("ListAudit(job j1) = %+v, %v", res.Entries, err)
	}
	if res, err := as.ListAudit(ctx, store.ListAuditParams{Tenant: "tenant-b"}); err != nil || len(res.Entries) != 1 {
		t.Fatalf("ListAudit(tenant-b) = %+v, %v", res.Entries, err)
	}
	if _, err := as.ListAudit(ctx, store.ListAuditParams{Tenant: "tenant-a", Cursor: "not-a-cursor"}); !errors.Is(err, store.ErrInvalidArgument) {
		t.Fatalf("ListAudit(bad cursor) error = %v, want ErrInvalidArgument", err)
	}
}
