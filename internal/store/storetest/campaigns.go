package storetest

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/store"
)

func sameCampaign(a, b store.Campaign) bool {
	if !bytes.Equal(a.Request, b.Request) || !a.LastFiredAt.Equal(b.LastFiredAt) ||
		!a.CreatedAt.Equal(b.CreatedAt) || !a.UpdatedAt.Equal(b.UpdatedAt) {
		return false
	}
	a.Request, b.Request = nil, nil
	a.LastFiredAt, b.LastFiredAt = time.Time{}, time.Time{}
	a.CreatedAt, b.CreatedAt = time.Time{}, time.Time{}
	a.UpdatedAt, b.UpdatedAt = time.Time{}, time.Time{}
	return reflect.DeepEqual(a, b)
}

func campaign(tenant, id string) store.Campaign {
	return store.Campaign{
		Tenant: tenant, ID: id, Name: "name of " + id, Schedule: "cron(0 9 * * ? *)", Mode: "snapshot",
		Request:     []byte(`{"template":"Hi {{name}}","recipients":[{"to":"u1"}]}`),
		MaxDelaySec: 600, Enabled: true, CreatedBy: "storetest", CreatedAt: at(time.Second), UpdatedAt: at(time.Second),
	}
}

func testCampaigns(t *testing.T, s store.Store, _ Capabilities) {
	ctx := ctxOf(t)
	requery := campaign("tenant-a", "camp-2")
	requery.Mode, requery.Request, requery.Source = "requery", []byte(`{"template":"x"}`), "https://crm.example/recipients"
	requery.Schedule, requery.Enabled, requery.MaxDelaySec = "rate(1 hour)", false, 0
	requery.LastFiredAt = at(time.Hour)
	bare := store.Campaign{Tenant: "tenant-b", ID: "camp-1"}
	zoned := campaign("tenant-a", "camp-1")
	zoned.Timezone = "America/New_York"
	puts := []store.Campaign{requery, zoned, bare, campaign("tenant-b", "camp-3")}
	for _, c := range puts {
		got, err := s.PutCampaign(ctx, c)
		if err != nil {
			t.Fatalf("PutCampaign(%s/%s): %v", c.Tenant, c.ID, err)
		}
		if !sameCampaign(got, c) {
			t.Fatalf("PutCampaign returned %+v, want %+v", got, c)
		}
	}
	get := func(tenant, id string) store.Campaign {
		t.Helper()
		c, err := s.GetCampaign(ctx, tenant, id)
		if err != nil {
			t.Fatalf("GetCampaign(%s/%s): %v", tenant, id, err)
		}
		return c
	}
	for _, c := range puts {
		if got := get(c.Tenant, c.ID); !sameCampaign(got, c) {
			t.Fatalf("GetCampaign(%s/%s) = %+v, want %+v", c.Tenant, c.ID, got, c)
		}
	}
	for _, k := range [][2]string{{"tenant-b", "camp-2"}, {"tenant-a", "camp-3"}, {"tenant-c", "camp-1"}} {
		if _, err := s.GetCampaign(ctx, k[0], k[1]); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("GetCampaign(%s/%s) error = %v, want ErrNotFound", k[0], k[1], err)
		}
	}

	// Replace: a firing recorded, the campaign disabled, back to the
	// stack's time zone.
	fired := get("tenant-a", "camp-1")
	if fired.Timezone != "America/New_York" {
		t.Fatalf("GetCampaign(tenant-a/camp-1).Timezone = %q, want America/New_York", fired.Timezone)
	}
	fired.LastFiredAt, fired.UpdatedAt, fired.Enabled, fired.Timezone = at(24*time.Hour), at(24*time.Hour), false, ""
	if _, err := s.PutCampaign(ctx, fired); err != nil {
		t.Fatalf("PutCampaign(replace): %v", err)
	}
	if got := get("tenant-a", "camp-1"); !sameCampaign(got, fired) {
		t.Fatalf("GetCampaign after replace = %+v, want %+v", got, fired)
	}

	ids := func(tenant string) []string {
		t.Helper()
		list, err := s.ListCampaigns(ctx, tenant)
		if err != nil {
			t.Fatalf("ListCampaigns(%q): %v", tenant, err)
		}
		var out []string
		for _, c := range list {
			if tenant != "" && c.Tenant != tenant {
				t.Fatalf("ListCampaigns(%s) returned %s's campaign %s", tenant, c.Tenant, c.ID)
			}
			if stored := get(c.Tenant, c.ID); !sameCampaign(c, stored) {
				t.Fatalf("ListCampaigns returned %+v, stored %+v", c, stored)
			}
			out = append(out, fmt.Sprintf("%s/%s", c.Tenant, c.ID))
		}
		return out
	}
	if got, want := ids("tenant-a"), []string{"tenant-a/camp-1", "tenant-a/camp-2"}; !slices.Equal(got, want) {
		t.Fatalf("ListCampaigns(tenant-a) = %v, want %v (ordered by id)", got, want)
	}
	if got, want := ids("tenant-b"), []string{"tenant-b/camp-1", "tenant-b/camp-3"}; !slices.Equal(got, want) {
		t.Fatalf("ListCampaigns(tenant-b) = %v, want %v", got, want)
	}
	if got := ids("tenant-c"); len(got) != 0 {
		t.Fatalf("ListCampaigns(tenant without campaigns) = %v", got)
	}
	all := []string{"tenant-a/camp-1", "tenant-a/camp-2", "tenant-b/camp-1", "tenant-b/camp-3"}
	if got := ids(""); !slices.Equal(slices.Sorted(slices.Values(got)), all) {
		t.Fatalf("ListCampaigns(all tenants) = %v, want %v", got, all)
	}

	// Delete: only the named tenant's campaign; absent is ErrNotFound.
	if err := s.DeleteCampaign(ctx, "tenant-c", "camp-1"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("DeleteCampaign(another tenant's id) error = %v, want ErrNotFound", err)
	}
	if err := s.DeleteCampaign(ctx, "tenant-b", "camp-1"); err != nil {
		t.Fatalf("DeleteCampaign: %v", err)
	}
	if _, err := s.GetCampaign(ctx, "tenant-b", "camp-1"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("GetCampaign(deleted) error = %v, want ErrNotFound", err)
	}
	if err := s.DeleteCampaign(ctx, "tenant-b", "camp-1"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("DeleteCampaign(deleted) error = %v, want ErrNotFound", err)
	}
	if got := get("tenant-a", "camp-1"); !sameCampaign(got, fired) {
		t.Fatalf("deleting tenant-b's camp-1 changed tenant-a's: %+v", got)
	}
	want := []string{"tenant-a/camp-1", "tenant-a/camp-2", "tenant-b/camp-3"}
	if got := ids(""); !slices.Equal(slices.Sorted(slices.Values(got)), want) {
		t.Fatalf("ListCampaigns(all tenants) after delete = %v, want %v", got, want)
	}
	if _, err := s.PutCampaign(ctx, store.Campaign{ID: "camp-1"}); !errors.Is(err, store.ErrInvalidArgument) {
		t.Fatalf("PutCampaign(empty tenant) error = %v, want ErrInvalidArgument", err)
	}
}
