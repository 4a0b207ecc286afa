package rental

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode"

	"github.com/google/uuid"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/auth"
	"github.com/svc-dev/svc/internal/money"
)

// offersOf returns a provider's offers, from the cache unless fresh are
// needed or the cache is older than the TTL.
func (m *Manager) offersOf(ctx context.Context, p Provider, fresh bool) ([]Offer, error) {
	now := m.now()
	m.mu.Lock()
	c, ok := m.offers[p.Name()]
	m.mu.Unlock()
	if ok && !fresh && now.Sub(c.at) < m.cfg.CatalogueTTL {
		return c.offers, c.err
	}
	octx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	offers, err := p.Offers(octx)
	if err != nil {
		m.log.Warn("rental: provider offers", "provider", p.Name(), "err", err)
		if ok {
			// A provider that does not answer keeps its last offers, shown
			// as unavailable: they cannot be placed now.
			stale := slices.Clone(c.offers)
			for i := range stale {
				stale[i].Available = false
			}
			return stale, nil
		}
	}
	m.mu.Lock()
	m.offers[p.Name()] = offerCache{at: now, offers: offers, err: err}
	m.mu.Unlock()
	return offers, err
}

// priced is an offer with its price in pence and its provider.
type priced struct {
	Offer
	provider Provider
	price    money.GBP
	rank     int
}

// allOffers gathers every provider's offers with their prices.
func (m *Manager) allOffers(ctx context.Context, fresh bool) []priced {
	var out []priced
	for _, p := range m.cfg.Providers {
		offers, _ := m.offersOf(ctx, p, fresh)
		for _, o := range offers {
			rate := m.cfg.Rates[o.Currency]
			if o.Currency == "GBP" {
				rate = 1
			}
			price, ok := toPence(o.PriceMinor, rate, m.cfg.Margin)
			t, known := tierByID(o.TierID)
			if !ok || !known {
				continue // a currency without a rate, or an unknown tier
			}
			out = append(out, priced{Offer: o, provider: p, price: price, rank: t.Rank})
		}
	}
	return out
}

// Catalogue is the GPU catalogue as an organisation sees it: for each GPU,
// every tier some machine can be placed in, at the cheapest price of the
// machines that satisfy it (a machine satisfies its own tier and every
// tier ranked below).
func (m *Manager) Catalogue(ctx context.Context, orgID string) []api.CatalogueEntry {
	floor := m.floorRank(orgID)
	return catalogue(m.allOffers(ctx, false), floor)
}

func catalogue(offers []priced, floor int) []api.CatalogueEntry {
	byGPU := map[string][]priced{}
	var order []string
	for _, o := range offers {
		if _, ok := byGPU[o.GPUModelID]; !ok {
			order = append(order, o.GPUModelID)
		}
		byGPU[o.GPUModelID] = append(byGPU[o.GPUModelID], o)
	}
	slices.Sort(order)
	out := make([]api.CatalogueEntry, 0, len(order))
	for _, id := range order {
		os := byGPU[id]
		first := os[0]
		e := api.CatalogueEntry{GPUModelID: id, Label: first.Label, Vendor: first.Vendor, Model: first.Model,
			Generation: first.Generation, VRAMGB: first.VRAMGB, GPUCount: first.GPUCount, Tiers: []api.Tier{}}
		for _, t := range Tiers() {
			if tier, ok := tierOf(os, t); ok {
				tier.Allowed = t.Rank >= floor
				e.Tiers = append(e.Tiers, tier)
			}
		}
		out = append(out, e)
	}
	return out
}

// tierOf is tier t of a GPU from the machines that satisfy it.
func tierOf(offers []priced, t Tier) (api.Tier, bool) {
	var fit []priced
	for _, o := range offers {
		if o.rank >= t.Rank {
			fit = append(fit, o)
		}
	}
	if len(fit) == 0 {
		return api.Tier{}, false
	}
	tier := api.Tier{TierID: t.ID, Label: t.Label, Rank: t.Rank, Description: t.Description}
	// The price is the cheapest machine with capacity now, or the cheapest
	// of all when none has any.
	slices.SortFunc(fit, func(a, b priced) int { return cmp.Compare(a.price, b.price) })
	tier.PricePerHourGBP = fit[0].price
	unknownRAM := false
	var maxRAM float64
	for _, o := range fit {
		if o.Available && !tier.Available {
			tier.Available, tier.PricePerHourGBP = true, o.price
		}
		if o.RAMGB <= 0 {
			unknownRAM = true
		}
		maxRAM = max(maxRAM, o.RAMGB)
	}
	if !unknownRAM {
		tier.MaxRAMGB = &maxRAM
	}
	return tier, true
}

// floorRank is the rank of the organisation's jurisdiction floor; tiers
// ranked below it are not allowed.
func (m *Manager) floorRank(orgID string) int {
	o, ok := m.cfg.Accounts.OrgByID(orgID)
	if !ok || o.Settings.JurisdictionFloor == nil {
		return 0
	}
	if t, ok := tierByID(*o.Settings.JurisdictionFloor); ok {
		return t.Rank
	}
	// A floor naming no tier this gateway knows admits nothing: safer
	// than admitting everything.
	return 1 << 30
}

// Allow is the rental rate limit: one request per API key per RentEvery,
// counted whether or not the request then succeeds. It is checked before
// anything else of the request, its body included.
// With a shared Limiter the count is the database's; when it cannot be
// read the request is refused as unavailable, never let through uncounted.
func (m *Manager) Allow(keyID string) error {
	if m.cfg.Limiter == nil {
		if ok, wait := m.mem.allow(keyID, m.cfg.RentEvery); !ok {
			return rentLimited(wait)
		}
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), limiterTimeout)
	defer cancel()
	ok, wait, err := m.cfg.Limiter.AllowRent(ctx, keyID, m.cfg.RentEvery)
	if err != nil {
		m.log.Warn("rental: rate limit", "err", err)
		return &api.Error{Kind: api.KindUnavailable, RetryAfter: 5 * time.Second,
			Message: "The rental rate limit cannot be checked now; try again shortly"}
	}
	if !ok {
		return rentLimited(wait)
	}
	return nil
}

// limiterTimeout bounds the shared limiter's answer.
const limiterTimeout = 5 * time.Second

func rentLimited(wait time.Duration) error {
	return &api.Error{Kind: api.KindRateLimited, RetryAfter: wait, Message: fmt.Sprintf(
		"One rental request per API key per minute; try again in %d s", api.RetrySeconds(wait))}
}

// MemoryLimiter is the rental rate limit of a gateway that runs alone:
// when each key last asked, in memory.
type MemoryLimiter struct {
	now  func() time.Time
	mu   sync.Mutex
	last map[string]time.Time // by API key id
}

// NewMemoryLimiter counts on the clock now reads.
func NewMemoryLimiter(now func() time.Time) *MemoryLimiter {
	return &MemoryLimiter{now: now, last: map[string]time.Time{}}
}

// AllowRent implements store.RentLimiter.
func (l *MemoryLimiter) AllowRent(_ context.Context, keyID string, every time.Duration) (bool, time.Duration, error) {
	ok, wait := l.allow(keyID, every)
	return ok, wait, nil
}

// seen notes a request of keyID at, unless a later one is noted: a
// restarted gateway learns the rentals its keys asked for lately from the
// ledger, so that the limit outlives the restart for them.
func (l *MemoryLimiter) seen(keyID string, at time.Time) {
	if keyID == "" {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if last, ok := l.last[keyID]; !ok || at.After(last) {
		l.last[keyID] = at
	}
}

// allow counts a request of keyID if the last was every ago or more;
// otherwise it tells how long until it would be.
func (l *MemoryLimiter) allow(keyID string, every time.Duration) (bool, time.Duration) {
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if last, ok := l.last[keyID]; ok && now.Sub(last) < every {
		return false, every - now.Sub(last)
	}
	l.last[keyID] = now
	return true, 0
}

// Rent asks for a rental, in the spec's order after Allow: the request's
// fields, the memory the models need (400), payment (402) and capacity
// (409). It returns the rental in provisioning once a provider has taken
// it.
func (m *Manager) Rent(ctx context.Context, p auth.Principal, req api.RentRequest) (api.Rental, error) {
	if err := checkRentRequest(&req); err != nil {
		return api.Rental{}, err
	}
	if err := m.own(p.OrgID); err != nil {
		return api.Rental{}, err
	}
	org, ok := m.cfg.Accounts.OrgByID(p.OrgID)
	if !ok {
		return api.Rental{}, api.NotFound("No such organisation")
	}
	tier, ok := tierByID(req.TierID)
	if !ok {
		return api.Rental{}, api.BadRequest("Unknown tier %q; see GET /api/v1/compute/catalogue", req.TierID)
	}
	offers := m.allOffers(ctx, true)
	var gpu []priced
	for _, o := range offers {
		if o.GPUModelID == req.GPUModelID {
			gpu = append(gpu, o)
		}
	}
	if len(gpu) == 0 {
		return api.Rental{}, api.BadRequest("Unknown GPU %q; see GET /api/v1/compute/catalogue", req.GPUModelID)
	}
	ct, ok := tierOf(gpu, tier)
	if !ok {
		return api.Rental{}, api.BadRequest("%s is not offered in the %s tier", gpu[0].Label, tier.Label)
	}
	if tier.Rank < m.floorRank(p.OrgID) {
		return api.Rental{}, api.BadRequest("The %s tier is below your organisation's jurisdiction floor", tier.Label)
	}
	var variants []Variant
	for _, id := range req.Models {
		v, ok := variantByID(m.models, id)
		if !ok {
			return api.Rental{}, api.BadRequest("Unknown model variant %q; see GET /api/v1/compute/models", id)
		}
		variants = append(variants, v)
	}
	// 400: no machine of this GPU in this tier has the system memory the
	// models need. An unknown maximum never rules the GPU out.
	if ct.MaxRAMGB != nil {
		for _, v := range variants {
			if v.MinRAMGB != nil && *v.MinRAMGB > *ct.MaxRAMGB {
				return api.Rental{}, api.BadRequest("%s needs %g GB of system memory; the %s machines in the %s tier have at most %g GB",
					v.VariantID, *v.MinRAMGB, gpu[0].Label, tier.Label, *ct.MaxRAMGB)
			}
		}
	}
	// 409 unless a machine of the GPU in a tier satisfying the request
	// has capacity; the cheapest is tried first, the next if it is taken.
	var cands []priced
	for _, o := range gpu {
		if o.rank >= tier.Rank && o.Available && (ct.MaxRAMGB == nil || fitsRAM(o, variants)) {
			cands = append(cands, o)
		}
	}
	slices.SortStableFunc(cands, func(a, b priced) int { return cmp.Or(cmp.Compare(a.price, b.price), cmp.Compare(a.rank, b.rank)) })

	r, secret, err := m.checkAndCreate(ctx, p.OrgID, p.KeyID, req, tier, gpu[0], ct.PricePerHourGBP, variants, len(cands) > 0)
	if err != nil {
		return api.Rental{}, err
	}
	defer func() {
		m.mu.Lock()
		delete(m.placing, r.ID)
		m.mu.Unlock()
	}()
	var lastErr error
	for _, o := range cands {
		launch := Launch{RentalID: r.ID, Offer: o.Offer, Worker: WorkerSpec{Gateway: m.cfg.Gateway, Token: secret,
			Name: r.Name, Models: variants, MaxRuntime: nodeTimer(org)}}
		launch.BootScript = BootScript(launch, m.cfg.Boot)
		cctx, cancel := context.WithTimeout(ctx, time.Minute)
		inst, err := o.provider.Create(cctx, launch)
		cancel()
		if err != nil {
			lastErr = err
			m.log.Info("rental: placement refused", "rental", r.ID, "provider", o.provider.Name(), "offer", o.Ref, "region", o.Region, "err", err)
			m.mu.Lock()
			r.note(m.now(), "placement_refused", fmt.Sprintf("%s %s in %s: %v", o.provider.Name(), o.Ref, o.Region, err))
			m.mu.Unlock()
			continue
		}
		m.mu.Lock()
		placed := o.Offer
		at := m.now()
		r.Provider, r.InstanceID, r.Placed, r.PlacedAt = o.provider.Name(), inst.ID, &placed, &at
		r.Price = o.price
		if inst.BootPhase != "" {
			r.BootPhase = inst.BootPhase
		}
		r.note(at, "placed", fmt.Sprintf("%s %s in %s (%s tier)", o.provider.Name(), o.Ref, o.Region, o.TierID))
		err = m.saveLocked(r)
		view := r.view(m.now(), nil, m.downloadGB)
		m.mu.Unlock()
		if err != nil {
			// The machine exists but the ledger does not say so: take it
			// down rather than run it unbilled.
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
			_ = o.provider.Destroy(dctx, inst.ID)
			cancel()
			return api.Rental{}, err
		}
		m.log.Info("rental placed", "rental", r.ID, "org", p.OrgID, "provider", o.provider.Name(), "instance", inst.ID, "price_per_hour_gbp", o.price)
		return view, nil
	}
	// Nothing took it: the rental never existed for billing, and the
	// client is answered that it was refused. The ledger keeps the
	// attempt, stopped with the reason, which the API does not list.
	m.abandon(r, lastErr)
	if errors.Is(lastErr, ErrNoCapacity) {
		return api.Rental{}, api.Conflict("No capacity for %s in the %s tier now; try again later or another tier", gpu[0].Label, tier.Label)
	}
	return api.Rental{}, &api.Error{Kind: api.KindUpstream, Message: fmt.Sprintf("The provider could not place the machine: %v", lastErr)}
}

func fitsRAM(o priced, vs []Variant) bool {
	for _, v := range vs {
		if v.MinRAMGB != nil && o.RAMGB > 0 && *v.MinRAMGB > o.RAMGB {
			return false
		}
	}
	return true
}

// nodeTimer is the maximum runtime the machine enforces itself: the
// organisation's, plus a margin so the gateway's own stop comes first.
func nodeTimer(org api.Organization) time.Duration {
	if org.Settings.MaxRuntimeSeconds == nil {
		return 0
	}
	return time.Duration(*org.Settings.MaxRuntimeSeconds)*time.Second + 10*time.Minute
}

// checkPayment is the 402 rule: a card on file, credit for the new GPU's
// first hour plus the next hour of the running rentals, and a monthly
// budget not yet reached.
func (m *Manager) checkPayment(org api.Organization, price money.GBP, now time.Time) error {
	s := org.Settings
	if !s.PaymentCardOnFile {
		return &api.Error{Kind: api.KindPaymentRequired, Message: "No payment card on file; add one in the console before renting"}
	}
	m.mu.Lock()
	var spent, nextHour, month money.GBP
	ms := monthStart(now)
	for _, r := range m.rentals {
		if r.OrgID != org.ID {
			continue
		}
		end := r.billingEnd(now)
		spent += cost(r.Price, r.billedSeconds(end))
		month += cost(r.Price, secondsBetween(r.StartedAt, r.StoppedAt, ms, end))
		if r.active() && r.StopRequestedAt == nil {
			nextHour += r.Price
		}
	}
	m.mu.Unlock()
	if need := price + nextHour; s.CreditBalanceGBP-spent < need {
		return &api.Error{Kind: api.KindPaymentRequired, Message: fmt.Sprintf(
			"Not enough credit: £%s left, and this GPU's first hour plus the next hour of your running rentals need £%s",
			s.CreditBalanceGBP-spent, need)}
	}
	if s.MonthlyBudgetGBP != nil && month >= *s.MonthlyBudgetGBP {
		return &api.Error{Kind: api.KindPaymentRequired, Message: fmt.Sprintf(
			"The monthly budget of £%s is reached (£%s this month)", *s.MonthlyBudgetGBP, month)}
	}
	return nil
}

// checkAndCreate checks payment, then capacity (placeable), and creates
// the rental, holding renting throughout: a rent waits for the one before
// it, or for ctx. Until a provider places it, the rental counts at the
// price it was checked for.
func (m *Manager) checkAndCreate(ctx context.Context, orgID, keyID string, req api.RentRequest, tier Tier, gpu priced, price money.GBP,
	variants []Variant, placeable bool) (*record, string, error) {
	select {
	case m.renting <- struct{}{}:
	case <-ctx.Done():
		return nil, "", ctx.Err()
	}
	defer func() { <-m.renting }()
	// The organisation as it is now, not as when the request began.
	org, ok := m.cfg.Accounts.OrgByID(orgID)
	if !ok {
		return nil, "", api.NotFound("No such organisation")
	}
	if req.Name != "" {
		// 400 before 402 and 409: a name that is taken stays taken
		// whatever credit or capacity the next try finds.
		workers := m.cfg.Fleet.Workers(orgID)
		m.mu.Lock()
		_, err := m.nameLocked(orgID, req.Name, "", workers)
		m.mu.Unlock()
		if err != nil {
			return nil, "", err
		}
	}
	if err := m.checkPayment(org, price, m.now()); err != nil {
		return nil, "", err
	}
	if !placeable {
		return nil, "", api.Conflict("No capacity for %s in the %s tier now; try again later or another tier", gpu.Label, tier.Label)
	}
	return m.create(orgID, keyID, org.Name, req, tier, gpu, price, variants, m.now())
}

// create records a new rental in provisioning, at price until it is
// placed, with a fresh worker token bound to it, before any provider is
// asked: a machine placed for a rental the ledger does not know would be
// found and destroyed at the next start. The caller holds renting.
func (m *Manager) create(orgID, keyID, orgName string, req api.RentRequest, tier Tier, gpu priced, price money.GBP, variants []Variant, now time.Time) (*record, string, error) {
	id := uuid.NewString()
	// The fleet may be another replica's (a cluster's): it is asked
	// before the lock, which the rentals' readers wait on.
	workers := m.cfg.Fleet.Workers(orgID)
	m.mu.Lock()
	name, err := m.nameLocked(orgID, req.Name, "Rented "+gpu.Label, workers)
	m.mu.Unlock()
	if err != nil {
		return nil, "", err
	}
	tok, err := m.cfg.Accounts.CreateWorkerToken(orgName, api.CreateWorkerTokenRequest{Name: "rental " + id})
	if err != nil {
		return nil, "", fmt.Errorf("rental token: %w", err)
	}
	models := make([]string, len(variants))
	for i, v := range variants {
		models[i] = v.VariantID
	}
	r := &record{ID: id, OrgID: orgID, Name: name, GPUModelID: gpu.GPUModelID, Label: gpu.Label,
		TierID: tier.ID, TierLabel: tier.Label, Models: models, Status: api.RentalProvisioning,
		WorkerID: m.cfg.WorkerID(orgID, name), TokenID: tok.ID, KeyID: keyID, CreatedAt: now, BootPhase: api.BootQueued, Price: price,
		Provider: gpu.provider.Name(), Notes: []api.RentalNote{}}
	r.note(now, "requested", fmt.Sprintf("%s in the %s tier", gpu.Label, tier.Label))
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.saveLocked(r); err != nil {
		_, _ = m.cfg.Accounts.RevokeWorkerToken(orgName, tok.ID)
		return nil, "", err
	}
	m.rentals[id] = r
	// Placing from the moment it exists: a reconciliation listing the
	// provider's machines before this one's is placed must not take it
	// for a machine that vanished.
	m.placing[id] = true
	return r, tok.Secret, nil
}

// abandon stops a rental no provider placed.
func (m *Manager) abandon(r *record, why error) {
	now := m.now()
	if org, ok := m.cfg.Accounts.OrgByID(r.OrgID); ok {
		_, _ = m.cfg.Accounts.RevokeWorkerToken(org.Name, r.TokenID)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	msg := fmt.Sprintf("no provider placed it: %v", why)
	r.Status, r.Error, r.Refused = api.RentalStopped, msg, true
	r.StopRequestedAt, r.StoppedAt = &now, &now
	r.note(now, "stopped", msg)
	if err := m.saveLocked(r); err != nil {
		m.log.Error("rental: save", "rental", r.ID, "err", err)
	}
}

// nameLocked picks the rental's worker name: the one asked for, which must
// not be taken by a worker or running rental of the organisation, or the
// default, numbered when taken.
func (m *Manager) nameLocked(orgID, asked, def string, workers []api.Worker) (string, error) {
	taken := map[string]bool{}
	for _, r := range m.rentals {
		if r.OrgID == orgID && r.active() {
			taken[r.Name] = true
		}
	}
	for _, w := range workers {
		taken[w.WorkerName] = true
	}
	if asked != "" {
		if taken[asked] {
			return "", api.BadRequest("A worker or running rental is already called %q; choose another name", asked)
		}
		return asked, nil
	}
	name := def
	for n := 2; taken[name]; n++ {
		name = fmt.Sprintf("%s %d", def, n)
	}
	return name, nil
}

// checkRentRequest is the 422 check of a rental request's fields.
func checkRentRequest(req *api.RentRequest) error {
	var v api.Validator
	if strings.TrimSpace(req.GPUModelID) == "" {
		v.Add("gpu_model_id", api.FieldMissing, "required")
	}
	if strings.TrimSpace(req.TierID) == "" {
		v.Add("tier_id", api.FieldMissing, "required")
	}
	if len(req.Models) > 8 {
		v.Add("models", api.FieldInvalid, "at most 8 variants")
	}
	seen := map[string]bool{}
	for i, id := range req.Models {
		if strings.TrimSpace(id) == "" || seen[id] {
			v.Add(fmt.Sprintf("models.%d", i), api.FieldInvalid, "a variant id, each once")
		}
		seen[id] = true
	}
	req.Name = strings.TrimSpace(req.Name)
	if len([]rune(req.Name)) > 128 || strings.ContainsFunc(req.Name, unicode.IsControl) {
		v.Add("name", api.FieldInvalid, "up to 128 characters, no control characters")
	}
	return v.Err()
}

// Spend is the organisation's spend report for the current calendar month
// (UTC). Rentals that span the month's start count only their time in it.
func (m *Manager) Spend(orgID string) (api.SpendReport, error) {
	if err := m.own(orgID); err != nil {
		return api.SpendReport{}, err
	}
	now := m.now()
	ms := monthStart(now)
	org, _ := m.cfg.Accounts.OrgByID(orgID)
	serving := m.serving(orgID)
	m.mu.Lock()
	defer m.mu.Unlock()
	rep := api.SpendReport{PeriodStart: ms, MonthlyBudgetGBP: org.Settings.MonthlyBudgetGBP, Lines: []api.SpendLine{}}
	var spent money.GBP
	var rs []*record
	for _, r := range m.rentals {
		if r.OrgID != orgID || r.Refused {
			continue
		}
		end := r.billingEnd(now)
		spent += cost(r.Price, r.billedSeconds(end))
		if r.active() {
			rep.ActiveCount++
		}
		if r.active() || (r.StoppedAt != nil && r.StoppedAt.After(ms)) || r.CreatedAt.After(ms) {
			rs = append(rs, r)
		}
	}
	slices.SortFunc(rs, func(a, b *record) int { return cmp.Or(b.CreatedAt.Compare(a.CreatedAt), cmp.Compare(a.ID, b.ID)) })
	for _, r := range rs {
		secs := secondsBetween(r.StartedAt, r.StoppedAt, ms, r.billingEnd(now))
		line := api.SpendLine{RentalID: r.ID, GPUModelID: r.GPUModelID, Label: r.Label, TierLabel: r.TierLabel,
			Status: r.Status, PricePerHourGBP: r.Price, Hours: hours(secs), CostGBP: cost(r.Price, secs),
			StartedAt: r.StartedAt, StoppedAt: r.StoppedAt, Serving: r.active() && serving[r.WorkerID]}
		rep.MonthToDateGBP += line.CostGBP
		rep.Lines = append(rep.Lines, line)
	}
	rep.CreditRemainingGBP = org.Settings.CreditBalanceGBP - spent
	return rep, nil
}
