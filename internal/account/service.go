package account

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/auth"
)

// Default names created on the first start of an empty data directory.
const (
	DefaultOrg         = "default"
	DefaultUser        = "admin"
	defaultKeyName     = "admin"
	defaultWorkerToken = "default"
)

// Service owns the account state. Reads take a shared lock; changes are
// serialised, written to the store, and only then made visible.
type Service struct {
	store  Store
	shared SharedStore // the store, when other processes write it too
	log    *slog.Logger

	wmu     sync.Mutex   // held by whoever is changing state, across the store write
	mu      sync.RWMutex // guards st's maps for readers
	st      state
	version int64 // the store's Records.Version that st holds; guarded by wmu
	// tokens is signalled when a live worker token was revoked: here, or
	// in the store by another process (Reload).
	tokens chan struct{}
}

type memberKey struct{ orgID, userID string }

type state struct {
	orgs      map[string]*Org
	orgNames  map[string]string
	users     map[string]*User
	userNames map[string]string
	members   map[memberKey]*Member
	keys      map[string]*keyEntry
	tokens    map[string]*tokenEntry
}

// Entries are replaced, never mutated, so a pointer read under the lock may
// be used after it is released. Only lastUsed changes in place.
type keyEntry struct {
	Key
	lastUsed *lastUsed
}

type tokenEntry struct {
	WorkerToken
	lastUsed *lastUsed
}

// lastUsed is touched on every request without a lock and flushed to the
// store in the background.
type lastUsed struct {
	at      atomic.Int64 // unix nanoseconds
	flushed atomic.Int64
}

func (l *lastUsed) touch(now time.Time) {
	// Only move it a second at a time, so busy keys do not keep dirtying a
	// shared cache line; and back too, when the system clock is set back,
	// rather than freeze until the clock passes the old time again.
	if d := now.UnixNano() - l.at.Load(); d > int64(time.Second) || d < -int64(time.Second) {
		l.at.Store(now.UnixNano())
	}
}

func (l *lastUsed) time() *time.Time {
	n := l.at.Load()
	if n == 0 {
		return nil
	}
	t := time.Unix(0, n).UTC()
	return &t
}

// Options tune a Service.
type Options struct {
	Logger *slog.Logger
}

// New loads every account record from store.
func New(store Store, opts Options) (*Service, error) {
	s := &Service{store: store, log: opts.Logger, tokens: make(chan struct{}, 1)}
	s.shared, _ = store.(SharedStore)
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if err := s.reloadLocked(); err != nil {
		return nil, err
	}
	return s, nil
}

// Reload replaces the records in memory with the store's: for a store
// other processes write, on their notifications and periodically in case
// one was missed. A last-used time in memory newer than the store's is
// kept.
func (s *Service) Reload() error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	return s.reloadLocked()
}

// reloadLocked is Reload for a caller holding wmu (or New).
func (s *Service) reloadLocked() error {
	recs, err := s.store.LoadAccounts()
	if err != nil {
		return fmt.Errorf("load accounts: %w", err)
	}
	st := state{
		orgs: map[string]*Org{}, orgNames: map[string]string{},
		users: map[string]*User{}, userNames: map[string]string{},
		members: map[memberKey]*Member{},
		keys:    map[string]*keyEntry{}, tokens: map[string]*tokenEntry{},
	}
	st.apply(&change{orgs: recs.Orgs, users: recs.Users, members: recs.Members, keys: recs.Keys, tokens: recs.WorkerTokens})
	// Writers hold wmu, so s.st is read here without mu.
	for id, e := range st.keys {
		if old := s.st.keys[id]; old != nil {
			e.lastUsed = old.lastUsed
		}
		e.lastUsed.merge(recs.LastUsed[auth.PrefixOf(auth.KindAPIKey, id)])
	}
	for id, e := range st.tokens {
		if old := s.st.tokens[id]; old != nil {
			e.lastUsed = old.lastUsed
		}
		e.lastUsed.merge(recs.LastUsed[auth.PrefixOf(auth.KindWorkerToken, id)])
	}
	revoked := lostTokens(s.st.tokens, st.tokens)
	s.mu.Lock()
	s.st = st
	s.mu.Unlock()
	s.version = recs.Version
	if revoked {
		s.tokensRevoked()
	}
	return nil
}

// lostTokens reports whether a token live in old is not in new: revoked,
// or gone with its organisation.
func lostTokens(old, new map[string]*tokenEntry) bool {
	for id, e := range old {
		if e.RevokedAt != nil {
			continue
		}
		if n := new[id]; n == nil || n.RevokedAt != nil {
			return true
		}
	}
	return false
}

// merge takes a stored time that is newer than the one in memory; it is
// in the store already, so it is not flushed again.
func (l *lastUsed) merge(t time.Time) {
	if t.IsZero() {
		return
	}
	n := t.UnixNano()
	for {
		cur := l.at.Load()
		if n <= cur {
			return
		}
		if l.at.CompareAndSwap(cur, n) {
			l.flushed.Store(n)
			return
		}
	}
}

// errStore answers a change that a shared store could not take: the
// database is unreachable, which a retry may outlast.
var errStore = &api.Error{Kind: api.KindUnavailable, RetryAfter: 5 * time.Second,
	Message: "The account store is unavailable; try again shortly"}

// errConcurrent answers a change that lost a race with another replica's.
var errConcurrent = api.Conflict("The accounts were changed elsewhere at the same time; try again")

// lock takes wmu for a change. On a shared store it first reloads, so that
// the change is decided on what every replica wrote.
func (s *Service) lock() error {
	s.wmu.Lock()
	if s.shared == nil {
		return nil
	}
	if err := s.reloadLocked(); err != nil {
		s.wmu.Unlock()
		s.log.Warn("accounts", "err", err)
		return errStore
	}
	return nil
}

// change is one transaction's worth of records to write and then apply.
type change struct {
	orgs    []Org
	users   []User
	members []Member
	removed []memberKey
	keys    []Key
	tokens  []WorkerToken
}

func (c *change) write(w Writer) error {
	for _, o := range c.orgs {
		if err := w.PutOrg(o); err != nil {
			return err
		}
	}
	for _, u := range c.users {
		if err := w.PutUser(u); err != nil {
			return err
		}
	}
	for _, m := range c.members {
		if err := w.PutMember(m); err != nil {
			return err
		}
	}
	for _, k := range c.removed {
		if err := w.DeleteMember(k.orgID, k.userID); err != nil {
			return err
		}
	}
	for _, k := range c.keys {
		if err := w.PutKey(k); err != nil {
			return err
		}
	}
	for _, t := range c.tokens {
		if err := w.PutWorkerToken(t); err != nil {
			return err
		}
	}
	return nil
}

func (st *state) apply(c *change) {
	for _, o := range c.orgs {
		st.orgs[o.ID] = &o
		st.orgNames[o.Name] = o.ID
	}
	for _, u := range c.users {
		st.users[u.ID] = &u
		st.userNames[u.Name] = u.ID
	}
	for _, m := range c.members {
		st.members[memberKey{m.OrgID, m.UserID}] = &m
	}
	for _, k := range c.removed {
		delete(st.members, k)
	}
	for _, k := range c.keys {
		e := &keyEntry{Key: k, lastUsed: &lastUsed{}}
		if old := st.keys[k.ID]; old != nil {
			e.lastUsed = old.lastUsed
		}
		st.keys[k.ID] = e
	}
	for _, t := range c.tokens {
		e := &tokenEntry{WorkerToken: t, lastUsed: &lastUsed{}}
		if old := st.tokens[t.ID]; old != nil {
			e.lastUsed = old.lastUsed
		}
		st.tokens[t.ID] = e
	}
}

// commit writes c to the store and then makes it visible. The caller holds wmu.
func (s *Service) commit(c *change) error { return s.commitAfter(c, nil) }

// commitAfter is commit running first, when not nil, inside the store's
// transaction before anything is written: on a shared store, only once
// the transaction is known to be the one that writes.
func (s *Service) commitAfter(c *change, first func() error) error {
	write := c.write
	var firstErr error
	if first != nil {
		write = func(w Writer) error {
			if firstErr = first(); firstErr != nil {
				return firstErr
			}
			return c.write(w)
		}
	}
	if s.shared == nil {
		if err := s.store.WriteAccounts(write); err != nil {
			return fmt.Errorf("write accounts: %w", err)
		}
	} else {
		v, err := s.shared.WriteAccountsIf(s.version, write)
		switch {
		case firstErr != nil:
			return firstErr
		case errors.Is(err, ErrStale):
			if err := s.reloadLocked(); err != nil {
				s.log.Warn("accounts", "err", err)
			}
			return errConcurrent
		case err != nil:
			s.log.Warn("accounts", "err", err)
			return errStore
		}
		s.version = v
	}
	s.mu.Lock()
	revoked := false
	for _, t := range c.tokens {
		if old := s.st.tokens[t.ID]; t.RevokedAt != nil && old != nil && old.RevokedAt == nil {
			revoked = true
		}
	}
	s.st.apply(c)
	s.mu.Unlock()
	if revoked {
		s.tokensRevoked()
	}
	return nil
}

// TokensRevoked is signalled after a worker token that was live is no
// longer, here or (on a shared store) in another process: whoever holds
// links made with it checks them again (WorkerTokenLive). A reload that
// revokes nothing says nothing, so a cluster's periodic reloads do not
// walk the fleet. Signals that come while one waits unread are one.
func (s *Service) TokensRevoked() <-chan struct{} { return s.tokens }

func (s *Service) tokensRevoked() {
	select {
	case s.tokens <- struct{}{}:
	default:
	}
}

// WorkerTokenLive reports whether the worker token id still lets its
// workers connect: it exists and is not revoked.
func (s *Service) WorkerTokenLive(id string) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	e := s.st.tokens[id]
	return e != nil && e.RevokedAt == nil
}

func (s *Service) stamp() time.Time { return time.Now().UTC().Truncate(time.Millisecond) }

// Secrets are the credentials made on the first start.
type Secrets struct {
	AdminKey    string
	WorkerToken string
}

// Bootstrap creates the default organisation, its owner, an unrestricted key
// and a worker token when the store holds no organisation yet. persist is
// called with the secrets before anything is committed, so a crash can never
// leave stored credentials whose secrets nobody has. It reports whether it
// created anything.
func (s *Service) Bootstrap(persist func(Secrets) error) (bool, error) {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if s.shared != nil {
		if err := s.reloadLocked(); err != nil {
			return false, err
		}
	}
	if len(s.st.orgs) > 0 {
		return false, nil
	}
	now := s.stamp()
	org := Org{ID: uuid.NewString(), Name: DefaultOrg, Plan: api.PlanPro, CreatedAt: now}
	user := User{ID: uuid.NewString(), Name: DefaultUser, CreatedAt: now}
	key := auth.NewCredential(auth.KindAPIKey)
	tok := auth.NewCredential(auth.KindWorkerToken)
	c := &change{
		orgs:    []Org{org},
		users:   []User{user},
		members: []Member{{OrgID: org.ID, UserID: user.ID, Role: auth.RoleOwner, AddedAt: now}},
		keys: []Key{{ID: key.ID, OrgID: org.ID, UserID: user.ID, Name: defaultKeyName, Hash: key.Hash,
			Unrestricted: true, Permissions: auth.Permissions(), CreatedAt: now}},
		tokens: []WorkerToken{{ID: tok.ID, OrgID: org.ID, Name: defaultWorkerToken, Hash: tok.Hash, CreatedAt: now}},
	}
	save := func() error {
		if err := persist(Secrets{AdminKey: key.Secret, WorkerToken: tok.Secret}); err != nil {
			return fmt.Errorf("save bootstrap secrets: %w", err)
		}
		return nil
	}
	if s.shared != nil {
		// Replicas starting together on an empty database race here; the
		// one whose write finds the records unchanged creates them, and
		// only it keeps secrets. The others see its organisation.
		err := s.commitAfter(c, save)
		if err == errConcurrent && len(s.st.orgs) > 0 {
			return false, nil
		}
		return err == nil, err
	}
	if err := save(); err != nil {
		return false, err
	}
	if err := s.commit(c); err != nil {
		return false, err
	}
	return true, nil
}

var (
	errMissingKey = &api.Error{Kind: api.KindUnauthenticated, Code: "invalid_api_key", Message: "Invalid API key"}
	errRevokedKey = &api.Error{Kind: api.KindUnauthenticated, Code: "invalid_api_key", Message: "This API key has been revoked"}
	errBadToken   = &api.Error{Kind: api.KindUnauthenticated, Code: "invalid_worker_token", Message: "Invalid or revoked worker token"}
)

// Authenticate resolves an API key to the principal it acts as. Unknown,
// malformed and revoked keys are 401s.
func (s *Service) Authenticate(secret string) (auth.Principal, error) {
	kind, id, ok := auth.Parse(secret)
	if !ok || kind != auth.KindAPIKey {
		return auth.Principal{}, errMissingKey
	}
	s.mu.RLock()
	e := s.st.keys[id]
	var role auth.Role
	if e != nil {
		if m := s.st.members[memberKey{e.OrgID, e.UserID}]; m != nil {
			role = m.Role
		}
	}
	s.mu.RUnlock()
	if e == nil || !e.Hash.Matches(secret) {
		return auth.Principal{}, errMissingKey
	}
	if e.RevokedAt != nil || role == "" {
		return auth.Principal{}, errRevokedKey
	}
	e.lastUsed.touch(time.Now())
	return auth.Principal{
		OrgID: e.OrgID, UserID: e.UserID, KeyID: e.ID, Role: role,
		Unrestricted: e.Unrestricted, Permissions: e.Permissions, ContentFilter: e.ContentFilter,
	}, nil
}

// AuthenticateWorker resolves a worker token to its organisation.
func (s *Service) AuthenticateWorker(secret string) (orgID, tokenID string, err error) {
	kind, id, ok := auth.Parse(secret)
	if !ok || kind != auth.KindWorkerToken {
		return "", "", errBadToken
	}
	s.mu.RLock()
	e := s.st.tokens[id]
	s.mu.RUnlock()
	if e == nil || !e.Hash.Matches(secret) || e.RevokedAt != nil {
		return "", "", errBadToken
	}
	e.lastUsed.touch(time.Now())
	return e.OrgID, e.ID, nil
}

// OrgByID returns the organisation a principal belongs to.
func (s *Service) OrgByID(id string) (api.Organization, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	o := s.st.orgs[id]
	if o == nil {
		return api.Organization{}, false
	}
	return o.view(), true
}

// FlushLastUsed writes the last-used times that moved since the last flush.
func (s *Service) FlushLastUsed() error {
	type dirty struct {
		prefix string
		at     int64
		l      *lastUsed
	}
	var ds []dirty
	s.mu.RLock()
	for _, e := range s.st.keys {
		if at := e.lastUsed.at.Load(); at != e.lastUsed.flushed.Load() {
			ds = append(ds, dirty{auth.PrefixOf(auth.KindAPIKey, e.ID), at, e.lastUsed})
		}
	}
	for _, e := range s.st.tokens {
		if at := e.lastUsed.at.Load(); at != e.lastUsed.flushed.Load() {
			ds = append(ds, dirty{auth.PrefixOf(auth.KindWorkerToken, e.ID), at, e.lastUsed})
		}
	}
	s.mu.RUnlock()
	if len(ds) == 0 {
		return nil
	}
	err := s.store.WriteAccounts(func(w Writer) error {
		for _, d := range ds {
			if err := w.PutLastUsed(d.prefix, time.Unix(0, d.at).UTC()); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("flush last-used times: %w", err)
	}
	for _, d := range ds {
		d.l.flushed.Store(d.at)
	}
	return nil
}

// Follow keeps the records in step with a store other processes write,
// until ctx ends: it reloads whenever listen reports a change (listen
// calls changed once it listens and after every reconnection, and runs
// until ctx ends), and every resync regardless, in case a report was lost.
func (s *Service) Follow(ctx context.Context, resync time.Duration, listen func(ctx context.Context, changed func()) error) error {
	kick := make(chan struct{}, 1)
	changed := func() {
		select {
		case kick <- struct{}{}:
		default: // a reload is due already, and will see this change
		}
	}
	listened := make(chan error, 1)
	go func() { listened <- listen(ctx, changed) }()
	t := time.NewTicker(resync)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			if listened != nil {
				<-listened
			}
			return nil
		case err := <-listened:
			// Only the resync is left to follow the store by.
			s.log.Warn("accounts: listening for changes stopped", "err", err)
			listened = nil
			continue
		case <-kick:
		case <-t.C:
		}
		if err := s.Reload(); err != nil {
			s.log.Warn("accounts", "err", err)
		}
	}
}

// Run flushes last-used times every interval until ctx ends, then once more.
func (s *Service) Run(ctx context.Context, every time.Duration) error {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return s.FlushLastUsed()
		case <-t.C:
			if err := s.FlushLastUsed(); err != nil {
				// A failed flush is retried on the next tick; the times stay in memory.
				s.log.Warn("accounts", "err", err)
			}
		}
	}
}

func (o *Org) view() api.Organization {
	return api.Organization{ID: o.ID, Name: o.Name, Plan: o.Plan, Settings: o.Settings, CreatedAt: o.CreatedAt}
}

func sortedBy[T any, K cmp.Ordered](xs []T, key func(T) K) []T {
	slices.SortFunc(xs, func(a, b T) int { return cmp.Compare(key(a), key(b)) })
	return xs
}
