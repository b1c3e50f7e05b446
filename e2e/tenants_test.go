package e2e

import (
	"bytes"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/api"
)

// TestTenantsRolesAndAccounts (issue 12): through `qunfa dev`, the
// platform operator creates a second tenant and grants it a provider
// account; that tenant's admin makes tokens of each role. No tenant reads,
// changes or sends through what is another's; each role is held to what
// it may do; revocation and expiry act on the next call; no token secret
// reaches the logs or the data directory.
func TestTenantsRolesAndAccounts(t *testing.T) {
	t.Parallel()
	m := startMock(t)
	d := startDev(t, m, devOptions{})
	as := func(token string) http.Header {
		return http.Header{"Authorization": {"Bearer " + token}, "Content-Type": {"application/json"}}
	}
	call := func(token, method, path string, body any) reply {
		t.Helper()
		var b []byte
		if body != nil {
			b = mustJSON(t, body)
		}
		r, err := send(t.Context(), method, d.URL+path, as(token), b)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		return r
	}
	expect := func(r reply, status int, what string) {
		t.Helper()
		if r.Status != status {
			t.Fatalf("%s: status %d, want %d: %s", what, r.Status, status, r.Body)
		}
	}
	newToken := func(r reply) api.NewTokenAnswer {
		t.Helper()
		var nt api.NewTokenAnswer
		expect(r, 201, "create token")
		if err := json.Unmarshal(r.Body, &nt); err != nil || nt.Secret == "" {
			t.Fatalf("new token %s: %v", r.Body, err)
		}
		return nt
	}

	// The platform operator: tenant acme's first token and its account.
	acme := newToken(call(testAdminToken, "POST", "/v1/tenants/acme/tokens", map[string]any{"name": "acme admin", "role": "admin"}))
	expect(call(testAdminToken, "PUT", "/v1/tenants/acme/accounts/acme-acct", nil), 200, "grant acme-acct")
	expect(call(acme.Secret, "PUT", "/v1/tenants/acme/accounts/acme-2", nil), 403, "a tenant token granting")
	expect(call(acme.Secret, "PUT", "/v1/accounts/acme-acct", map[string]any{"rate_per_sec": 1000, "burst": 1000}), 200, "acme PUT its account")
	// The default tenant (qunfa dev grants on first PUT) has its own.
	d.putAccount("dflt-acct", map[string]any{"rate_per_sec": 1000, "burst": 1000})

	// No sharing of provider accounts, in either direction.
	expect(call(testToken, "PUT", "/v1/accounts/acme-acct", map[string]any{"rate_per_sec": 1}), 403, "default PUT acme's account")
	expect(call(acme.Secret, "PUT", "/v1/accounts/dflt-acct", map[string]any{"rate_per_sec": 1}), 403, "acme PUT default's account")
	expect(call(testAdminToken, "PUT", "/v1/tenants/acme/accounts/dflt-acct", nil), 409, "granting an owned account to another tenant")
	expect(call(acme.Secret, "POST", "/v1/jobs", jobRequest{Template: testTemplate, Recipients: recipientsFor("dflt-acct", 2)}), 422, "acme sending through default's account")

	// Roles, within acme.
	reader := newToken(call(acme.Secret, "POST", "/v1/tokens", map[string]any{"name": "reader", "role": "read"}))
	operator := newToken(call(acme.Secret, "POST", "/v1/tokens", map[string]any{"name": "operator", "role": "operate"}))
	expect(call(reader.Secret, "POST", "/v1/jobs", jobRequest{Template: testTemplate, Recipients: recipientsFor("acme-acct", 2)}), 403, "read token submitting")
	expect(call(operator.Secret, "PUT", "/v1/accounts/acme-acct", map[string]any{"rate_per_sec": 1}), 403, "operate token changing an account")
	expect(call(operator.Secret, "POST", "/v1/tokens", map[string]any{"name": "x", "role": "admin"}), 403, "operate token making tokens")
	rcs := recipientsFor("acme-acct", 20)
	r := call(operator.Secret, "POST", "/v1/jobs", jobRequest{Name: "acme", Template: testTemplate, Recipients: rcs})
	expect(r, 202, "operate token submitting")
	var job api.Job
	if err := json.Unmarshal(r.Body, &job); err != nil {
		t.Fatal(err)
	}
	// Reads: the reader sees acme's job, the default tenant does not.
	expect(call(reader.Secret, "GET", "/v1/jobs/"+job.ID, nil), 200, "reader GET acme's job")
	expect(call(testToken, "GET", "/v1/jobs/"+job.ID, nil), 404, "default GET acme's job")
	expect(call(testToken, "POST", "/v1/jobs/"+job.ID+"/cancel", nil), 404, "default cancelling acme's job")
	var list api.JobList
	if err := json.Unmarshal(call(testToken, "GET", "/v1/jobs", nil).Body, &list); err != nil {
		t.Fatal(err)
	}
	for _, j := range list.Jobs {
		if j.ID == job.ID {
			t.Fatal("the default tenant lists acme's job")
		}
	}
	// Sent through acme's account, exactly once.
	if !poll(20*time.Second, 50*time.Millisecond, func() bool {
		var j api.Job
		_ = json.Unmarshal(call(reader.Secret, "GET", "/v1/jobs/"+job.ID, nil).Body, &j)
		return j.Status == "completed"
	}) {
		t.Fatalf("acme's job did not complete")
	}
	checkExactlyOnce(t, m.deliveries(), job.ID, rcs)

	// Revocation acts on the next call; expiry once its time is up.
	expect(call(acme.Secret, "DELETE", "/v1/tokens/"+reader.ID, nil), 204, "revoke the reader")
	expect(call(reader.Secret, "GET", "/v1/jobs", nil), 401, "a revoked token")
	short := newToken(call(acme.Secret, "POST", "/v1/tokens", map[string]any{"name": "short", "role": "read",
		"expires_at": time.Now().Add(1500 * time.Millisecond).UTC().Format(time.RFC3339Nano)}))
	expect(call(short.Secret, "GET", "/v1/jobs", nil), 200, "a token before its expiry")
	if !poll(5*time.Second, 100*time.Millisecond, func() bool { return call(short.Secret, "GET", "/v1/jobs", nil).Status == 401 }) {
		t.Fatal("an expired token still works")
	}

	// No secret of a created token in the logs or the data directory.
	secrets := [][]byte{[]byte(acme.Secret), []byte(reader.Secret), []byte(operator.Secret), []byte(short.Secret), []byte(testAdminToken)}
	stderr, err := os.ReadFile(d.stderr)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range secrets {
		if bytes.Contains(stderr, s) {
			t.Errorf("a token secret is in qunfa dev's log")
		}
	}
	err = filepath.WalkDir(d.dataDir, func(path string, e os.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, s := range secrets {
			if bytes.Contains(b, s) {
				t.Errorf("a token secret is stored in %s", path)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
