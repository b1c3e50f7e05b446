package credcache_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/clock"
	"github.com/qunfa/qunfa/internal/provider"
	"github.com/qunfa/qunfa/internal/provider/credcache"
)

// secrets is a backing store whose secrets the test rotates and breaks.
type secrets struct {
	mu     sync.Mutex
	tokens map[string]string
	err    error
	reads  map[string]int
	gate   chan struct{} // when set, reads wait for it
}

func newSecrets(kv ...string) *secrets {
	s := &secrets{tokens: map[string]string{}, reads: map[string]int{}}
	for i := 0; i+1 < len(kv); i += 2 {
		s.tokens[kv[i]] = kv[i+1]
	}
	return s
}

func (s *secrets) Token(ctx context.Context, tenant string) (string, error) {
	if s.gate != nil {
		<-s.gate
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reads[tenant]++
	if s.err != nil {
		return "", s.err
	}
	tok, ok := s.tokens[tenant]
	if !ok {
		return "", provider.ErrNoCredentials
	}
	return tok, nil
}

func (s *secrets) Invalidate(context.Context, string, string) {}

func (s *secrets) set(tenant, tok string) { s.mu.Lock(); s.tokens[tenant] = tok; s.mu.Unlock() }
func (s *secrets) fail(err error)         { s.mu.Lock(); s.err = err; s.mu.Unlock() }
func (s *secrets) count(tenant string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reads[tenant]
}

var t0 = time.Date(2025, 3, 1, 9, 0, 0, 0, time.UTC)

func newCache(s *secrets, clk clock.Clock, log *slog.Logger) *credcache.Cache {
	return credcache.New(s, credcache.Options{TTL: 5 * time.Minute, MinRefresh: 5 * time.Second, Clock: clk, Log: log})
}

func mustToken(t *testing.T, c *credcache.Cache, tenant, want string) {
	t.Helper()
	got, err := c.Token(context.Background(), tenant)
	if err != nil || got != want {
		t.Fatalf("Token(%q) = %q, %v; want %q", tenant, got, err, want)
	}
}

func TestCacheReadsOncePerTTL(t *testing.T) {
	s := newSecrets("tenant-a", "tok-a1", "tenant-b", "tok-b")
	clk := clock.NewFake(t0)
	c := newCache(s, clk, nil)
	for range 3 {
		mustToken(t, c, "tenant-a", "tok-a1")
	}
	mustToken(t, c, "tenant-b", "tok-b")
	if n := s.count("tenant-a"); n != 1 {
		t.Fatalf("tenant-a read %d times within the TTL, want 1", n)
	}
	s.set("tenant-a", "tok-a2") // rotated
	clk.Advance(5*time.Minute - time.Second)
	mustToken(t, c, "tenant-a", "tok-a1")
	clk.Advance(time.Second)
	mustToken(t, c, "tenant-a", "tok-a2")
	if n := s.count("tenant-a"); n != 2 {
		t.Fatalf("tenant-a read %d times, want 2", n)
	}
}

func TestCacheInvalidateRereadsAtOnce(t *testing.T) {
	s := newSecrets("tenant-a", "tok-a1")
	clk := clock.NewFake(t0)
	c := newCache(s, clk, nil)
	ctx := context.Background()
	mustToken(t, c, "tenant-a", "tok-a1")
	s.set("tenant-a", "tok-a2")
	// A refusal of a token the cache does not hold changes nothing.
	c.Invalidate(ctx, "tenant-a", "tok-other")
	mustToken(t, c, "tenant-a", "tok-a1")
	// The provider refuses the held token: the next call reads again, with
	// no time passing.
	c.Invalidate(ctx, "tenant-a", "tok-a1")
	mustToken(t, c, "tenant-a", "tok-a2")
	if n := s.count("tenant-a"); n != 2 {
		t.Fatalf("reads = %d, want 2", n)
	}
	// Calls still in flight with the old token report it refused: ignored.
	c.Invalidate(ctx, "tenant-a", "tok-a1")
	mustToken(t, c, "tenant-a", "tok-a2")
	if n := s.count("tenant-a"); n != 2 {
		t.Fatalf("reads after a late refusal of the old token = %d, want 2", n)
	}
}

// A token the provider keeps refusing (the secret itself is wrong) is read
// again at most once per MinRefresh, not once per call.
func TestCacheRefusedTokenRereadAtMostOncePerMinRefresh(t *testing.T) {
	s := newSecrets("tenant-a", "bad")
	clk := clock.NewFake(t0)
	c := newCache(s, clk, nil)
	ctx := context.Background()
	mustToken(t, c, "tenant-a", "bad")
	for range 10 {
		c.Invalidate(ctx, "tenant-a", "bad")
		mustToken(t, c, "tenant-a", "bad")
	}
	if n := s.count("tenant-a"); n != 2 {
		t.Fatalf("reads = %d, want 2 (the first read, one re-read)", n)
	}
	clk.Advance(5 * time.Second)
	c.Invalidate(ctx, "tenant-a", "bad")
	mustToken(t, c, "tenant-a", "bad")
	if n := s.count("tenant-a"); n != 3 {
		t.Fatalf("reads after MinRefresh = %d, want 3", n)
	}
}

func TestCacheServesLastGoodTokenWhileTheStoreFails(t *testing.T) {
	s := newSecrets("tenant-a", "tok-a1")
	clk := clock.NewFake(t0)
	var logs bytes.Buffer
	c := newCache(s, clk, slog.New(slog.NewJSONHandler(&logs, nil)))
	mustToken(t, c, "tenant-a", "tok-a1")
	boom := errors.New("secrets manager unreachable")
	s.fail(boom)
	clk.Advance(5 * time.Minute)
	mustToken(t, c, "tenant-a", "tok-a1") // read fails, last good served
	mustToken(t, c, "tenant-a", "tok-a1") // no new read before MinRefresh
	if n := s.count("tenant-a"); n != 2 {
		t.Fatalf("reads = %d, want 2", n)
	}
	clk.Advance(5 * time.Second)
	mustToken(t, c, "tenant-a", "tok-a1")
	if n := s.count("tenant-a"); n != 3 {
		t.Fatalf("reads after MinRefresh = %d, want 3", n)
	}
	if !strings.Contains(logs.String(), "serving the cached ones") {
		t.Errorf("no warning logged: %s", logs.String())
	}
	if strings.Contains(logs.String(), "tok-a1") {
		t.Errorf("the token was logged: %s", logs.String())
	}
	// A refused token is not served from a failing store.
	c.Invalidate(context.Background(), "tenant-a", "tok-a1")
	if _, err := c.Token(context.Background(), "tenant-a"); !errors.Is(err, boom) {
		t.Fatalf("Token after refusal with the store down: err = %v, want %v", err, boom)
	}
}

func TestCacheErrors(t *testing.T) {
	s := newSecrets()
	clk := clock.NewFake(t0)
	c := newCache(s, clk, nil)
	// No credentials at all: reported, and remembered for the TTL.
	for range 2 {
		if _, err := c.Token(context.Background(), "tenant-x"); !errors.Is(err, provider.ErrNoCredentials) {
			t.Fatalf("err = %v, want ErrNoCredentials", err)
		}
	}
	if n := s.count("tenant-x"); n != 1 {
		t.Fatalf("reads = %d, want 1", n)
	}
	// A failing store with nothing cached: the error, wrapped.
	boom := errors.New("denied")
	s.fail(boom)
	_, err := c.Token(context.Background(), "tenant-y")
	if !errors.Is(err, boom) || !strings.Contains(err.Error(), "tenant-y") {
		t.Fatalf("err = %v, want %v naming the tenant", err, boom)
	}
}

func TestCacheConcurrentCallsShareOneRead(t *testing.T) {
	s := newSecrets("tenant-a", "tok-a1")
	s.gate = make(chan struct{})
	c := newCache(s, clock.NewFake(t0), nil)
	var wg sync.WaitGroup
	var ok atomic.Int32
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if tok, err := c.Token(context.Background(), "tenant-a"); err == nil && tok == "tok-a1" {
				ok.Add(1)
			}
		}()
	}
	close(s.gate)
	wg.Wait()
	if ok.Load() != 16 || s.count("tenant-a") != 1 {
		t.Fatalf("%d calls answered, %d reads; want 16 and 1", ok.Load(), s.count("tenant-a"))
	}
}
