package sender

import (
	"context"
	"sync"
	"time"

	"github.com/qunfa/qunfa/internal/store"
)

// AccountReads holds each account's record as this process last read it
// and when, shared by the process's turns: the shards of one Lambda
// invocation, and the later invocations of a warm container, read an
// account once per AccountRefresh between them instead of once per turn.
// A turn trusts an account for AccountRefresh from when it was read,
// whoever read it, so a rate change or a breaker threshold still takes
// effect within AccountRefresh.
type AccountReads struct {
	mu sync.Mutex
	m  map[string]accountRead
}

type accountRead struct {
	account store.Account
	at      time.Time
}

// maxAccountReads bounds the map; when full it is cleared.
const maxAccountReads = 4096

// readAccount returns the account and when it was read: the process's
// read when it is younger than refresh, else a read now. Without
// AccountReads every call reads.
func (s *Sender) readAccount(ctx context.Context, tenant, account string, now time.Time, refresh time.Duration) (store.Account, time.Time, error) {
	reads := s.Accounts
	if reads == nil {
		a, err := s.Store.GetAccount(ctx, tenant, account)
		return a, now, err
	}
	k := tenant + "\x00" + account
	reads.mu.Lock()
	r, ok := reads.m[k]
	reads.mu.Unlock()
	if ok && !now.Before(r.at) && now.Sub(r.at) < refresh {
		return r.account, r.at, nil
	}
	a, err := s.Store.GetAccount(ctx, tenant, account)
	if err != nil {
		return store.Account{}, time.Time{}, err
	}
	reads.mu.Lock()
	if reads.m == nil || len(reads.m) >= maxAccountReads {
		reads.m = map[string]accountRead{}
	}
	reads.m[k] = accountRead{account: a, at: now}
	reads.mu.Unlock()
	return a, now, nil
}
