package dynamostore_test

import (
	"encoding/base64"
	"errors"
	"testing"

	"github.com/qunfa/qunfa/internal/store"
	"github.com/qunfa/qunfa/internal/store/dynamostore"
	"github.com/qunfa/qunfa/internal/store/storetest"
)

// TestTamperedJobsCursorIsInvalid: a jobs cursor that decodes but does not
// name a job of the caller's tenant index is ErrInvalidArgument (the API's
// 400), never sent to DynamoDB as a start key (a 500) nor used to page
// through another tenant's partition.
func TestTamperedJobsCursorIsInvalid(t *testing.T) {
	s := newStore(t, dynamostore.Options{})
	ctx := t.Context()
	for range 2 {
		p, _ := storetest.NewJob("tenant-b", 1, 1)
		if _, err := s.CreateJob(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	page, err := s.ListJobs(ctx, store.ListJobsParams{Tenant: "tenant-b", Limit: 1})
	if err != nil || page.NextCursor == "" {
		t.Fatalf("first page: %+v, %v", page, err)
	}
	if _, err := s.ListJobs(ctx, store.ListJobsParams{Tenant: "tenant-b", Limit: 1, Cursor: page.NextCursor}); err != nil {
		t.Fatalf("the real cursor: %v", err)
	}
	enc := func(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }
	for name, cursor := range map[string]string{
		"another tenant's":  page.NextCursor, // used by tenant-a below
		"no key attributes": enc(`{"foo":"bar"}`),
		"wrong partition":   enc(`{"pk":"JOB#x","sk":"J","g1pk":"TENANT#tenant-c","g1sk":"1"}`),
		"extra attribute":   enc(`{"pk":"JOB#x","sk":"J","g1pk":"TENANT#tenant-a","g1sk":"1","x":"y"}`),
	} {
		if _, err := s.ListJobs(ctx, store.ListJobsParams{Tenant: "tenant-a", Cursor: cursor}); !errors.Is(err, store.ErrInvalidArgument) {
			t.Errorf("%s cursor: error %v, want ErrInvalidArgument", name, err)
		}
	}
}
