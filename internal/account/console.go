package account

import (
	"regexp"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/auth"
	"github.com/svc-dev/svc/internal/moderation"
	"github.com/svc-dev/svc/internal/money"
)

var (
	orgNameRE  = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,62}$`)
	userNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._@+-]{0,63}$`)
	tierRE     = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,31}$`)
)

const (
	maxLabel      = 100
	maxRuntimeCap = 31 * 24 * time.Hour
	// maxRequestsPerMinute bounds the request rate setting far above what
	// one gateway serves, so that a typo of an extra digit or two is
	// still taken and only a value that cannot be meant is refused.
	maxRequestsPerMinute = 10_000_000
)

func checkLabel(v *api.Validator, field, s string) string {
	s = strings.TrimSpace(s)
	switch {
	case s == "":
		v.Add(field, api.FieldMissing, "required")
	case utf8.RuneCountInString(s) > maxLabel:
		v.Add(field, api.FieldTooLong, "at most %d characters", maxLabel)
	case strings.IndexFunc(s, unsafeRune) >= 0:
		v.Add(field, api.FieldInvalid, "must not contain control characters")
	}
	return s
}

// unsafeRune is a character a label or id must not hold: a control, or a
// bidirectional formatting character, which would show the text around it
// reversed in every listing that prints it.
func unsafeRune(r rune) bool {
	return unicode.IsControl(r) || unicode.Is(unicode.Bidi_Control, r)
}

// ListOrgs returns every organisation by name.
func (s *Service) ListOrgs() []api.Organization {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]api.Organization, 0, len(s.st.orgs))
	for _, o := range s.st.orgs {
		out = append(out, o.view())
	}
	return sortedBy(out, func(o api.Organization) string { return o.Name })
}

// Org returns one organisation by name.
func (s *Service) Org(name string) (api.Organization, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	o, err := s.st.org(name)
	if err != nil {
		return api.Organization{}, err
	}
	return o.view(), nil
}

func (st *state) org(name string) (*Org, error) {
	if o := st.orgs[st.orgNames[name]]; o != nil {
		return o, nil
	}
	return nil, api.NotFound("Organisation %q not found", name)
}

func (st *state) user(name string) (*User, error) {
	if u := st.users[st.userNames[name]]; u != nil {
		return u, nil
	}
	return nil, api.NotFound("User %q not found", name)
}

// CreateOrg adds an organisation (plan free unless given).
func (s *Service) CreateOrg(req api.CreateOrgRequest) (api.Organization, error) {
	if err := s.lock(); err != nil {
		return api.Organization{}, err
	}
	defer s.wmu.Unlock()
	var v api.Validator
	if !orgNameRE.MatchString(req.Name) {
		v.Add("name", api.FieldInvalid, "lower-case letters, digits and '-', 1 to 63 characters, starting with a letter or digit")
	}
	if req.Plan == "" {
		req.Plan = api.PlanFree
	}
	if !req.Plan.Valid() {
		v.Add("plan", api.FieldEnum, "one of free, pro, enterprise")
	}
	if err := v.Err(); err != nil {
		return api.Organization{}, err
	}
	if _, ok := s.st.orgNames[req.Name]; ok {
		return api.Organization{}, api.Conflict("Organisation %q already exists", req.Name)
	}
	o := Org{ID: uuid.NewString(), Name: req.Name, Plan: req.Plan, CreatedAt: s.stamp()}
	if err := s.commit(&change{orgs: []Org{o}}); err != nil {
		return api.Organization{}, err
	}
	return o.view(), nil
}

// UpdateOrg applies the fields present in p.
func (s *Service) UpdateOrg(name string, p api.OrgPatch) (api.Organization, error) {
	return s.UpdateOrgSeeing(name, p, nil)
}

// UpdateOrgSeeing is UpdateOrg, where seen lists, by organisation id, the
// workers known to the gateway now: when p turns worker approval on, they
// are recorded as approved in the same change, so that turning it on
// holds back only workers seen afterwards, not the fleet already serving.
func (s *Service) UpdateOrgSeeing(name string, p api.OrgPatch, seen func(orgID string) []WorkerRef) (api.Organization, error) {
	if err := s.lock(); err != nil {
		return api.Organization{}, err
	}
	defer s.wmu.Unlock()
	cur, err := s.st.org(name)
	if err != nil {
		return api.Organization{}, err
	}
	o := *cur
	var v api.Validator
	if p.Plan.Set {
		if p.Plan.Null || !p.Plan.Value.Valid() {
			v.Add("plan", api.FieldEnum, "one of free, pro, enterprise")
		} else {
			o.Plan = p.Plan.Value
		}
	}
	setBool(&v, "require_e2e", p.RequireE2E, &o.Settings.RequireE2E)
	setBool(&v, "content_filtering", p.ContentFiltering, &o.Settings.ContentFiltering)
	setBool(&v, "allow_remote_image_urls", p.AllowRemoteImageURLs, &o.Settings.AllowRemoteImageURLs)
	setBool(&v, "require_worker_approval", p.RequireWorkerApproval, &o.Settings.RequireWorkerApproval)
	if o.Settings.RequireWorkerApproval && !cur.Settings.RequireWorkerApproval && seen != nil {
		o.Approved = approve(o.Approved, seen(o.ID), "require_worker_approval turned on", s.stamp())
	}
	if p.ModerationModel.Set {
		// A model of the moderation catalogue: whether a worker serves it
		// is known only when a request needs it (409 then), but an id
		// outside the catalogue would fail every moderation and every
		// filtered chat of the organisation from the moment it is set.
		if m := p.ModerationModel.Ptr(); m == nil || *m == "" {
			o.Settings.ModerationModel = ""
		} else if _, ok := moderation.Lookup(*m); !ok {
			v.Add("moderation_model", api.FieldEnum, "one of %s, or null for the default (%s)",
				strings.Join(moderation.Catalogue(), ", "), api.DefaultModerationModel)
		} else {
			o.Settings.ModerationModel = *m
		}
	}
	if p.HomeRegion.Set {
		if r := p.HomeRegion.Ptr(); r == nil || *r == "" {
			o.Settings.HomeRegion = ""
		} else if !api.ValidRegion(*r) {
			v.Add("home_region", api.FieldInvalid, "a region name (up to 64 lower-case letters, digits, '.', '-' and '_'), or null for none")
		} else {
			o.Settings.HomeRegion = *r
		}
	}
	setBool(&v, "payment_card_on_file", p.PaymentCardOnFile, &o.Settings.PaymentCardOnFile)
	if p.JurisdictionFloor.Set {
		if f := p.JurisdictionFloor.Ptr(); f != nil && !tierRE.MatchString(*f) {
			v.Add("jurisdiction_floor", api.FieldInvalid, "a tier id (lower-case letters, digits, '-' and '_') or null")
		} else {
			o.Settings.JurisdictionFloor = f
		}
	}
	if p.MonthlyBudgetGBP.Set {
		if b := p.MonthlyBudgetGBP.Ptr(); b != nil && *b < 0 {
			v.Add("monthly_budget_gbp", api.FieldOutOfRange, "must be 0 or more, or null for no budget")
		} else {
			o.Settings.MonthlyBudgetGBP = b
		}
	}
	if p.MaxRuntimeSeconds.Set {
		if r := p.MaxRuntimeSeconds.Ptr(); r != nil && (*r < 60 || *r > int64(maxRuntimeCap/time.Second)) {
			v.Add("max_runtime_seconds", api.FieldOutOfRange, "between 60 and %d seconds, or null for no limit", int64(maxRuntimeCap/time.Second))
		} else {
			if r != nil && (o.Settings.MaxRuntimeSeconds == nil || *o.Settings.MaxRuntimeSeconds != *r) {
				since := s.stamp()
				o.Settings.MaxRuntimeSince = &since
			} else if r == nil {
				o.Settings.MaxRuntimeSince = nil
			}
			o.Settings.MaxRuntimeSeconds = r
		}
	}
	if p.RequestsPerMinute.Set {
		if n := p.RequestsPerMinute.Ptr(); n != nil && (*n < 0 || *n > maxRequestsPerMinute) {
			v.Add("requests_per_minute", api.FieldOutOfRange, "between 0 (no limit) and %d, or null for the plan's default", maxRequestsPerMinute)
		} else {
			o.Settings.RequestsPerMinute = n
		}
	}
	if err := v.Err(); err != nil {
		return api.Organization{}, err
	}
	if err := s.commit(&change{orgs: []Org{o}}); err != nil {
		return api.Organization{}, err
	}
	return o.view(), nil
}

func setBool(v *api.Validator, field string, o api.Optional[bool], dst *bool) {
	if !o.Set {
		return
	}
	if o.Null {
		v.Add(field, api.FieldWrongType, "must be true or false")
		return
	}
	*dst = o.Value
}

// AddCredit adds amount (negative to take away) to the credit balance,
// which may not go below zero.
func (s *Service) AddCredit(name string, amount money.GBP) (api.Organization, error) {
	if amount == 0 {
		// Nothing to add: a body without its amount, most likely.
		return api.Organization{}, api.Invalid(api.FieldError{Field: "amount_gbp", Type: api.FieldMissing,
			Message: "required: the pounds to add to the credit balance (negative to take away), not zero"})
	}
	if err := s.lock(); err != nil {
		return api.Organization{}, err
	}
	defer s.wmu.Unlock()
	cur, err := s.st.org(name)
	if err != nil {
		return api.Organization{}, err
	}
	o := *cur
	bal, err := o.Settings.CreditBalanceGBP.Add(amount)
	if err != nil {
		return api.Organization{}, api.Invalid(api.FieldError{Field: "amount_gbp", Type: api.FieldOutOfRange,
			Message: "the credit balance is " + o.Settings.CreditBalanceGBP.String() + ", and this amount would take it past the largest kept"})
	}
	if bal < 0 {
		return api.Organization{}, api.Invalid(api.FieldError{Field: "amount_gbp", Type: api.FieldOutOfRange,
			Message: "the credit balance is " + o.Settings.CreditBalanceGBP.String() + " and cannot go below zero"})
	}
	o.Settings.CreditBalanceGBP = bal
	if err := s.commit(&change{orgs: []Org{o}}); err != nil {
		return api.Organization{}, err
	}
	return o.view(), nil
}

// ListUsers returns every user by name.
func (s *Service) ListUsers() []api.User {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]api.User, 0, len(s.st.users))
	for _, u := range s.st.users {
		out = append(out, api.User{ID: u.ID, Name: u.Name, CreatedAt: u.CreatedAt})
	}
	return sortedBy(out, func(u api.User) string { return u.Name })
}

// CreateUser adds a user; roles are given per organisation with SetMember.
func (s *Service) CreateUser(req api.CreateUserRequest) (api.User, error) {
	if err := s.lock(); err != nil {
		return api.User{}, err
	}
	defer s.wmu.Unlock()
	if !userNameRE.MatchString(req.Name) {
		return api.User{}, api.Invalid(api.FieldError{Field: "name", Type: api.FieldInvalid,
			Message: "letters, digits and . _ @ + -, 1 to 64 characters, starting with a letter or digit"})
	}
	if _, ok := s.st.userNames[req.Name]; ok {
		return api.User{}, api.Conflict("User %q already exists", req.Name)
	}
	u := User{ID: uuid.NewString(), Name: req.Name, CreatedAt: s.stamp()}
	if err := s.commit(&change{users: []User{u}}); err != nil {
		return api.User{}, err
	}
	return api.User{ID: u.ID, Name: u.Name, CreatedAt: u.CreatedAt}, nil
}

// Members lists an organisation's members by user name.
func (s *Service) Members(org string) ([]api.Member, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	o, err := s.st.org(org)
	if err != nil {
		return nil, err
	}
	var out []api.Member
	for k, m := range s.st.members {
		if k.orgID == o.ID {
			out = append(out, s.st.memberView(m))
		}
	}
	return sortedBy(out, func(m api.Member) string { return m.User }), nil
}

func (st *state) memberView(m *Member) api.Member {
	return api.Member{UserID: m.UserID, User: st.users[m.UserID].Name, Role: string(m.Role), AddedAt: m.AddedAt}
}

func (st *state) owners(orgID string) int {
	n := 0
	for k, m := range st.members {
		if k.orgID == orgID && m.Role == auth.RoleOwner {
			n++
		}
	}
	return n
}

// SetMember gives user a role in org, adding them if needed. The last owner
// cannot be demoted.
func (s *Service) SetMember(org, user string, req api.SetMemberRequest) (api.Member, error) {
	if err := s.lock(); err != nil {
		return api.Member{}, err
	}
	defer s.wmu.Unlock()
	role := auth.Role(req.Role)
	if !role.Valid() {
		return api.Member{}, api.Invalid(api.FieldError{Field: "role", Type: api.FieldEnum, Message: "one of owner, operator, member"})
	}
	o, err := s.st.org(org)
	if err != nil {
		return api.Member{}, err
	}
	u, err := s.st.user(user)
	if err != nil {
		return api.Member{}, err
	}
	m := Member{OrgID: o.ID, UserID: u.ID, Role: role, AddedAt: s.stamp()}
	if cur := s.st.members[memberKey{o.ID, u.ID}]; cur != nil {
		m.AddedAt = cur.AddedAt
		if cur.Role == auth.RoleOwner && role != auth.RoleOwner && s.st.owners(o.ID) == 1 {
			return api.Member{}, api.Conflict("%s is the last owner of %s; make someone else owner first", user, org)
		}
	}
	if err := s.commit(&change{members: []Member{m}}); err != nil {
		return api.Member{}, err
	}
	return s.st.memberView(&m), nil
}

// RemoveMember takes user out of org and revokes their keys there, so no key
// outlives its holder's membership. The last owner cannot be removed.
func (s *Service) RemoveMember(org, user string) error {
	if err := s.lock(); err != nil {
		return err
	}
	defer s.wmu.Unlock()
	o, err := s.st.org(org)
	if err != nil {
		return err
	}
	u, err := s.st.user(user)
	if err != nil {
		return err
	}
	mk := memberKey{o.ID, u.ID}
	cur := s.st.members[mk]
	if cur == nil {
		return api.NotFound("%s is not a member of %s", user, org)
	}
	if cur.Role == auth.RoleOwner && s.st.owners(o.ID) == 1 {
		return api.Conflict("%s is the last owner of %s; make someone else owner first", user, org)
	}
	c := &change{removed: []memberKey{mk}}
	now := s.stamp()
	for _, e := range s.st.keys {
		if e.OrgID == o.ID && e.UserID == u.ID && e.RevokedAt == nil {
			k := e.Key
			k.RevokedAt = &now
			c.keys = append(c.keys, k)
		}
	}
	return s.commit(c)
}

// ListKeys lists an organisation's keys, revoked ones included, oldest first.
func (s *Service) ListKeys(org string) ([]api.APIKey, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	o, err := s.st.org(org)
	if err != nil {
		return nil, err
	}
	out := []api.APIKey{}
	for _, e := range s.st.keys {
		if e.OrgID == o.ID {
			out = append(out, s.st.keyView(e))
		}
	}
	return sortedBy(out, func(k api.APIKey) int64 { return k.CreatedAt.UnixNano() }), nil
}

func (st *state) keyView(e *keyEntry) api.APIKey {
	perms := make([]string, len(e.Permissions))
	for i, p := range e.Permissions {
		perms[i] = string(p)
	}
	var user string
	if u := st.users[e.UserID]; u != nil {
		user = u.Name
	}
	return api.APIKey{
		ID: e.ID, Prefix: auth.PrefixOf(auth.KindAPIKey, e.ID), Name: e.Name, UserID: e.UserID, User: user,
		Permissions: perms, Unrestricted: e.Unrestricted, ContentFilter: e.ContentFilter, CreatedAt: e.CreatedAt,
		LastUsedAt: e.lastUsed.time(), RevokedAt: e.RevokedAt,
	}
}

// CreateKey makes a key for a member of org. The answer carries the secret;
// it is never shown again.
func (s *Service) CreateKey(org string, req api.CreateKeyRequest) (api.APIKey, error) {
	if err := s.lock(); err != nil {
		return api.APIKey{}, err
	}
	defer s.wmu.Unlock()
	o, err := s.st.org(org)
	if err != nil {
		return api.APIKey{}, err
	}
	var v api.Validator
	name := checkLabel(&v, "name", req.Name)
	var u *User
	switch {
	case req.User == "":
		v.Add("user", api.FieldMissing, "required")
	default:
		if u, err = s.st.user(req.User); err != nil {
			v.Add("user", api.FieldInvalid, "no user named %q", req.User)
		} else if s.st.members[memberKey{o.ID, u.ID}] == nil {
			v.Add("user", api.FieldInvalid, "%s is not a member of %s", req.User, org)
		}
	}
	perms := auth.DefaultPermissions()
	switch {
	case req.Unrestricted && len(req.Permissions) > 0:
		v.Add("permissions", api.FieldInvalid, "an unrestricted key takes no permission list")
	case req.Unrestricted:
		perms = auth.Permissions()
	case req.Permissions != nil:
		perms = auth.ParsePermissions("permissions", req.Permissions, &v)
		if len(req.Permissions) == 0 {
			v.Add("permissions", api.FieldMissing, "give at least one permission, or leave the list out for the defaults")
		}
	}
	if err := v.Err(); err != nil {
		return api.APIKey{}, err
	}
	cred := auth.NewCredential(auth.KindAPIKey)
	k := Key{ID: cred.ID, OrgID: o.ID, UserID: u.ID, Name: name, Hash: cred.Hash,
		Permissions: perms, Unrestricted: req.Unrestricted, ContentFilter: req.ContentFilter, CreatedAt: s.stamp()}
	if err := s.commit(&change{keys: []Key{k}}); err != nil {
		return api.APIKey{}, err
	}
	s.mu.RLock()
	view := s.st.keyView(s.st.keys[k.ID])
	s.mu.RUnlock()
	view.Secret = cred.Secret
	return view, nil
}

// RevokeKey revokes a key of org; revoking twice is not an error.
func (s *Service) RevokeKey(org, id string) (api.APIKey, error) {
	if err := s.lock(); err != nil {
		return api.APIKey{}, err
	}
	defer s.wmu.Unlock()
	o, err := s.st.org(org)
	if err != nil {
		return api.APIKey{}, err
	}
	named := id
	id = credentialID(id, auth.KindAPIKey)
	e := s.st.keys[id]
	if e == nil || e.OrgID != o.ID {
		return api.APIKey{}, api.NotFound("No key %q in %s", auth.Redact(named), org)
	}
	if e.RevokedAt == nil {
		k := e.Key
		now := s.stamp()
		k.RevokedAt = &now
		if err := s.commit(&change{keys: []Key{k}}); err != nil {
			return api.APIKey{}, err
		}
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.st.keyView(s.st.keys[id]), nil
}

// ListWorkerTokens lists an organisation's worker tokens, oldest first.
func (s *Service) ListWorkerTokens(org string) ([]api.WorkerToken, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	o, err := s.st.org(org)
	if err != nil {
		return nil, err
	}
	out := []api.WorkerToken{}
	for _, e := range s.st.tokens {
		if e.OrgID == o.ID {
			out = append(out, e.view())
		}
	}
	return sortedBy(out, func(t api.WorkerToken) int64 { return t.CreatedAt.UnixNano() }), nil
}

func (e *tokenEntry) view() api.WorkerToken {
	return api.WorkerToken{ID: e.ID, Prefix: auth.PrefixOf(auth.KindWorkerToken, e.ID), Name: e.Name,
		CreatedAt: e.CreatedAt, LastUsedAt: e.lastUsed.time(), RevokedAt: e.RevokedAt}
}

// CreateWorkerToken makes a token worker agents of org connect with.
func (s *Service) CreateWorkerToken(org string, req api.CreateWorkerTokenRequest) (api.WorkerToken, error) {
	if err := s.lock(); err != nil {
		return api.WorkerToken{}, err
	}
	defer s.wmu.Unlock()
	o, err := s.st.org(org)
	if err != nil {
		return api.WorkerToken{}, err
	}
	var v api.Validator
	name := checkLabel(&v, "name", req.Name)
	if err := v.Err(); err != nil {
		return api.WorkerToken{}, err
	}
	cred := auth.NewCredential(auth.KindWorkerToken)
	t := WorkerToken{ID: cred.ID, OrgID: o.ID, Name: name, Hash: cred.Hash, CreatedAt: s.stamp()}
	if err := s.commit(&change{tokens: []WorkerToken{t}}); err != nil {
		return api.WorkerToken{}, err
	}
	view := (&tokenEntry{WorkerToken: t, lastUsed: &lastUsed{}}).view()
	view.Secret = cred.Secret
	return view, nil
}

// RevokeWorkerToken revokes a worker token of org; revoking twice is not an error.
func (s *Service) RevokeWorkerToken(org, id string) (api.WorkerToken, error) {
	if err := s.lock(); err != nil {
		return api.WorkerToken{}, err
	}
	defer s.wmu.Unlock()
	o, err := s.st.org(org)
	if err != nil {
		return api.WorkerToken{}, err
	}
	named := id
	id = credentialID(id, auth.KindWorkerToken)
	e := s.st.tokens[id]
	if e == nil || e.OrgID != o.ID {
		return api.WorkerToken{}, api.NotFound("No worker token %q in %s", auth.Redact(named), org)
	}
	if e.RevokedAt == nil {
		t := e.WorkerToken
		now := s.stamp()
		t.RevokedAt = &now
		if err := s.commit(&change{tokens: []WorkerToken{t}}); err != nil {
			return api.WorkerToken{}, err
		}
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.st.tokens[id].view(), nil
}

// credentialID is the id a revocation names: the id itself, the listed
// prefix svc_k_<id>, or the whole credential, which an operator revoking
// a leaked key is likely to paste.
func credentialID(named string, kind auth.Kind) string {
	if k, id, ok := auth.Parse(named); ok && k == kind {
		return id
	}
	return strings.TrimPrefix(named, string(kind))
}
