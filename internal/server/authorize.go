package server

import (
	"time"

	"github.com/svc-dev/svc/internal/api"
)

var (
	errNoKey = &api.Error{Kind: api.KindUnauthenticated, Code: "missing_api_key",
		Message: "Missing API key: send it as Authorization: Bearer <API_KEY> or in the x-api-key header"}
	errConsoleOnly = &api.Error{Kind: api.KindForbidden, Code: "console_only",
		Message: "This endpoint works only from the console; API keys cannot use it. Run `svc admin` on the server host"}
	errE2ERequired = &api.Error{Kind: api.KindForbidden, Type: api.TypeE2ERequired, Code: api.TypeE2ERequired,
		Message: "This organisation requires end-to-end encryption; send the request through an encrypting client"}
)

// authorize decides whether the call may reach its handler: key (401),
// console-only (403), permission (403 naming it), role (403), and the
// organisation's encryption requirement (403 e2e_required), in that order.
func (s *Server) authorize(c *call, console bool) error {
	switch c.route.access {
	case accessPublic:
		return nil
	case accessWorker:
		key := apiKey(c.ctx)
		if key == "" {
			return errNoKey
		}
		orgID, tokenID, err := s.accounts.AuthenticateWorker(key)
		if err != nil {
			// A worker refused is an operator's to hear of (its agent
			// stops); a flood of them is not the log's to hold.
			if n := s.badTokenN.Add(1); s.badTokenLog.due(time.Now()) {
				s.log.Warn("a worker link was refused: invalid or revoked worker token", "remote", c.ctx.RemoteAddr().String(),
					"refused_since_start", n)
			}
			return err
		}
		c.workerOrg, c.workerToken = orgID, tokenID
		return nil
	case accessPeer:
		return s.authorizePeer(c)
	case accessConsole:
		if console {
			return nil
		}
		// A key that is not one is 401 here as anywhere; a real key is
		// refused for what it asks.
		key := apiKey(c.ctx)
		if key == "" {
			return errNoKey
		}
		if _, err := s.accounts.Authenticate(key); err != nil {
			return err
		}
		return errConsoleOnly
	}
	key := apiKey(c.ctx)
	if key == "" {
		return errNoKey
	}
	p, err := s.accounts.Authenticate(key)
	if err != nil {
		return err
	}
	c.principal = p
	c.org, _ = s.accounts.OrgByID(p.OrgID)
	if err := p.Require(c.route.perm); err != nil {
		return err
	}
	if c.route.operator != "" {
		if err := p.RequireOperator(c.route.operator); err != nil {
			return err
		}
	}
	// No encrypted envelope is accepted on these routes, so every request
	// reaching here is plaintext.
	if c.route.e2e && c.org.Settings.RequireE2E && !sealed(c) {
		return errE2ERequired
	}
	return nil
}

// planGated refuses organisations on the Free plan with 403 plan_required,
// in the nested shape private inference's errors take: for its routes.
func (s *Server) planGated(feature string, next func(*call) error) func(*call) error {
	return paidPlans(feature, false, next)
}

// paidOnly is planGated outside private inference, where an error's
// detail is a string: the type rides in the envelope beside it.
func (s *Server) paidOnly(feature string, next func(*call) error) func(*call) error {
	return paidPlans(feature, true, next)
}

// paidPlans runs next for an organisation on a paid plan and refuses one
// on the Free plan with 403 plan_required, its envelope beside detail when
// envelope is set and nested in it otherwise.
func paidPlans(feature string, envelope bool, next func(*call) error) func(*call) error {
	return func(c *call) error {
		if !c.org.Plan.Paid() {
			e := api.PlanRequired("%s is part of the Pro and Enterprise plans; this organisation is on %s", feature, c.org.Plan)
			e.Envelope = envelope
			return e
		}
		return next(c)
	}
}
