package api_test

import (
	"net/http"
	"testing"

	"github.com/qunfa/qunfa/internal/api"
)

// TestSuppressionList: a suppressed recipient is dropped from the next job
// (counted as suppressed), the list is per tenant, and removal works.
func TestSuppressionList(t *testing.T) {
	s := newStack(t)
	if r := s.do("PUT", "/v1/suppressions/acct-a/user-a", tokenA, `{"reason": "unsubscribed"}`); r.status != http.StatusOK {
		t.Fatalf("put: %d %s", r.status, r.body)
	}
	var list api.SuppressionList
	s.do("GET", "/v1/suppressions", tokenA, nil).json(t, &list)
	if len(list.Suppressions) != 1 || list.Suppressions[0].To != "user-a" || list.Suppressions[0].Reason != "unsubscribed" {
		t.Fatalf("list %+v", list)
	}
	var other api.SuppressionList
	s.do("GET", "/v1/suppressions", tokenB, nil).json(t, &other)
	if len(other.Suppressions) != 0 {
		t.Fatalf("tenant B sees tenant A's list: %+v", other)
	}
	job := s.submitJob(tokenA, "with-suppressed", 4)
	if job.Total != 3 || job.Suppressed != 1 {
		t.Fatalf("job total %d suppressed %d, want 3 and 1", job.Total, job.Suppressed)
	}
	if r := s.do("DELETE", "/v1/suppressions/acct-a/user-a", tokenA, nil); r.status != http.StatusNoContent {
		t.Fatalf("delete: %d", r.status)
	}
	if job := s.submitJob(tokenA, "after-delete", 4); job.Total != 4 || job.Suppressed != 0 {
		t.Fatalf("after removal: total %d suppressed %d", job.Total, job.Suppressed)
	}
}
