package account

import (
	"cmp"
	"context"
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
	store Store
	log   *slog.Logger

	wmu sync.Mutex   // held by whoever is changing state, across the store write
	mu  sync.RWMutex // guards st's maps for readers
	st  state
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
	s := &Service{store: store, log: opts.Logger}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	recs, err := store.LoadAccounts()
	if err != nil {
		return nil, fmt.Errorf("load accounts: %w", err)
	}
	s.st = state{
		orgs: map[string]*Org{}, orgNames: map[string]string{},
		users: map[string]*User{}, userNames: map[string]string{},
		members: map[memberKey]*Member{},
		keys:    map[string]*keyEntry{}, tokens: map[string]*tokenEntry{},
	}
	s.st.apply(&change{orgs: recs.Orgs, users: recs.Users, members: recs.Members, keys: recs.Keys, tokens: recs.WorkerTokens})
	for _, e := range s.st.keys {
		e.lastUsed.load(recs.LastUsed[auth.PrefixOf(auth.KindAPIKey, e.ID)])
	}
	for _, e := range s.st.tokens {
		e.lastUsed.load(recs.LastUsed[auth.PrefixOf(auth.KindWorkerToken, e.ID)])
	}
	return s, nil
}

func (l *lastUsed) load(t time.Time) {
	if !t.IsZero() {
		l.at.Store(t.UnixNano())
		l.flushed.Store(t.UnixNano())
	}
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
func (s *Service) commit(c *change) error {
	if err := s.store.WriteAccounts(c.write); err != nil {
		return fmt.Errorf("write accounts: %w", err)
	}
	s.mu.Lock()
	s.st.apply(c)
	s.mu.Unlock()
	return nil
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
	if err := persist(Secrets{AdminKey: key.Secret, WorkerToken: tok.Secret}); err != nil {
		return false, fmt.Errorf("save bootstrap secrets: %w", err)
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
