package server

import (
	"context"
	"sync"
)

// tokenLinks are the worker links this server holds, by the worker token
// each was made with. A revoked token is usually a leaked one: its
// workers' links are cut when it is revoked, rather than left serving
// until the workers next reconnect.
type tokenLinks struct {
	mu sync.Mutex
	m  map[string]map[linkOf]int // token id → its links (a worker may hold two a moment)
}

type linkOf struct{ orgID, workerID string }

// add records a link of workerID made with token; forget undoes it.
func (t *tokenLinks) add(token, orgID, workerID string) (forget func()) {
	l := linkOf{orgID, workerID}
	t.mu.Lock()
	if t.m == nil {
		t.m = map[string]map[linkOf]int{}
	}
	if t.m[token] == nil {
		t.m[token] = map[linkOf]int{}
	}
	t.m[token][l]++
	t.mu.Unlock()
	return func() {
		t.mu.Lock()
		defer t.mu.Unlock()
		if t.m[token][l]--; t.m[token][l] <= 0 {
			delete(t.m[token], l)
		}
		if len(t.m[token]) == 0 {
			delete(t.m, token)
		}
	}
}

// revoked returns the links made with a token live does not accept.
func (t *tokenLinks) revoked(live func(token string) bool) []linkOf {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []linkOf
	for token, links := range t.m {
		if live(token) {
			continue
		}
		for l := range links {
			out = append(out, l)
		}
	}
	return out
}

// CutRevokedLinks disconnects, each time changed says the worker tokens
// changed, the workers linked here with a token no longer live, until ctx
// ends. Revoked on another replica, a token is seen here once the
// accounts are reloaded from the store.
func (s *Server) CutRevokedLinks(ctx context.Context, changed <-chan struct{}) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
		}
		for _, l := range s.byToken.revoked(s.accounts.WorkerTokenLive) {
			s.fleet.Disconnect(l.orgID, l.workerID, "its worker token was revoked")
		}
	}
}
