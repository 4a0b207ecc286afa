package server

import (
	"net/http"
	"slices"
	"strings"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/jsonbody"
	"github.com/svc-dev/svc/internal/rental"
)

// Console handlers: reachable only through the admin socket. Each decodes,
// calls the account service and encodes; the rules live in package account.

func (s *Server) listOrgs(c *call) error {
	writeJSON(c.ctx, http.StatusOK, map[string]any{"orgs": s.accounts.ListOrgs()})
	return nil
}

func (s *Server) createOrg(c *call) error {
	var req api.CreateOrgRequest
	if err := jsonbody.Strict(c.ctx.PostBody(), &req); err != nil {
		return err
	}
	v, err := s.accounts.CreateOrg(req)
	return respond(c, http.StatusCreated, v, err)
}

func (s *Server) getOrg(c *call) error {
	v, err := s.accounts.Org(c.params.get("org"))
	return respond(c, http.StatusOK, v, err)
}

func (s *Server) updateOrg(c *call) error {
	var p api.OrgPatch
	if err := jsonbody.Strict(c.ctx.PostBody(), &p); err != nil {
		return err
	}
	if f := p.JurisdictionFloor.Ptr(); p.JurisdictionFloor.Set && f != nil {
		// A floor no tier answers to admits no rental at all: a typo
		// would end the organisation's renting without a word.
		var ids []string
		for _, t := range rental.Tiers() {
			ids = append(ids, t.ID)
		}
		if !slices.Contains(ids, *f) {
			var v api.Validator
			v.Add("jurisdiction_floor", api.FieldEnum, "one of %s, or null for none", strings.Join(ids, ", "))
			return v.Err()
		}
	}
	v, err := s.accounts.UpdateOrgSeeing(c.params.get("org"), p, s.seenWorkers)
	return respond(c, http.StatusOK, v, err)
}

func (s *Server) addCredit(c *call) error {
	var req api.CreditRequest
	if err := jsonbody.Strict(c.ctx.PostBody(), &req); err != nil {
		return err
	}
	v, err := s.accounts.AddCredit(c.params.get("org"), req.AmountGBP)
	return respond(c, http.StatusOK, v, err)
}

func (s *Server) listMembers(c *call) error {
	ms, err := s.accounts.Members(c.params.get("org"))
	return respond(c, http.StatusOK, map[string]any{"members": nonNil(ms)}, err)
}

func (s *Server) setMember(c *call) error {
	var req api.SetMemberRequest
	if err := jsonbody.Strict(c.ctx.PostBody(), &req); err != nil {
		return err
	}
	v, err := s.accounts.SetMember(c.params.get("org"), c.params.get("user"), req)
	return respond(c, http.StatusOK, v, err)
}

func (s *Server) removeMember(c *call) error {
	if err := s.accounts.RemoveMember(c.params.get("org"), c.params.get("user")); err != nil {
		return err
	}
	c.ctx.SetStatusCode(http.StatusNoContent)
	return nil
}

func (s *Server) listKeys(c *call) error {
	ks, err := s.accounts.ListKeys(c.params.get("org"))
	return respond(c, http.StatusOK, map[string]any{"keys": ks}, err)
}

func (s *Server) createKey(c *call) error {
	var req api.CreateKeyRequest
	if err := jsonbody.Strict(c.ctx.PostBody(), &req); err != nil {
		return err
	}
	v, err := s.accounts.CreateKey(c.params.get("org"), req)
	return respond(c, http.StatusCreated, v, err)
}

func (s *Server) revokeKey(c *call) error {
	v, err := s.accounts.RevokeKey(c.params.get("org"), c.params.get("id"))
	return respond(c, http.StatusOK, v, err)
}

func (s *Server) listWorkerTokens(c *call) error {
	ts, err := s.accounts.ListWorkerTokens(c.params.get("org"))
	return respond(c, http.StatusOK, map[string]any{"worker_tokens": ts}, err)
}

func (s *Server) createWorkerToken(c *call) error {
	var req api.CreateWorkerTokenRequest
	if err := jsonbody.Strict(c.ctx.PostBody(), &req); err != nil {
		return err
	}
	v, err := s.accounts.CreateWorkerToken(c.params.get("org"), req)
	return respond(c, http.StatusCreated, v, err)
}

func (s *Server) revokeWorkerToken(c *call) error {
	v, err := s.accounts.RevokeWorkerToken(c.params.get("org"), c.params.get("id"))
	return respond(c, http.StatusOK, v, err)
}

func (s *Server) listUsers(c *call) error {
	writeJSON(c.ctx, http.StatusOK, map[string]any{"users": s.accounts.ListUsers()})
	return nil
}

func (s *Server) createUser(c *call) error {
	var req api.CreateUserRequest
	if err := jsonbody.Strict(c.ctx.PostBody(), &req); err != nil {
		return err
	}
	v, err := s.accounts.CreateUser(req)
	return respond(c, http.StatusCreated, v, err)
}

// respond writes v with status unless err is set, which it returns instead.
func respond(c *call, status int, v any, err error) error {
	if err != nil {
		return err
	}
	writeJSON(c.ctx, status, v)
	return nil
}

func nonNil[T any](xs []T) []T {
	if xs == nil {
		return []T{}
	}
	return xs
}
