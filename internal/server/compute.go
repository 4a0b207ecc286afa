package server

import (
	"context"
	"net/http"
	"time"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/jsonbody"
)

// The GPU rental endpoints: thin over the rental manager, which holds
// the rules.

// rentalTimeout bounds a rental call's work at the providers. The
// request's own context is not used for it: a fasthttp RequestCtx may not
// be a parent context (its Done races with the server's shutdown).
const rentalTimeout = 2 * time.Minute

func rentalContext() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), rentalTimeout)
}

func (s *Server) computeCatalogue(c *call) error {
	m := s.rentals
	ctx, cancel := rentalContext()
	defer cancel()
	writeJSON(c.ctx, http.StatusOK, m.Catalogue(ctx, c.principal.OrgID))
	return nil
}

func (s *Server) computeModels(c *call) error {
	m := s.rentals
	writeJSON(c.ctx, http.StatusOK, m.Models())
	return nil
}

func (s *Server) rent(c *call) error {
	m := s.rentals
	// The rate limit counts every call, a malformed one too.
	if err := m.Allow(c.principal.KeyID); err != nil {
		return err
	}
	var req api.RentRequest
	if err := jsonbody.Strict(c.ctx.PostBody(), &req); err != nil {
		return err
	}
	ctx, cancel := rentalContext()
	defer cancel()
	r, err := m.Rent(ctx, c.principal, req)
	if err != nil {
		return err
	}
	writeJSON(c.ctx, http.StatusAccepted, r)
	return nil
}

func (s *Server) listRentals(c *call) error {
	m := s.rentals
	rs, err := m.List(c.principal.OrgID)
	if err != nil {
		return err
	}
	writeJSON(c.ctx, http.StatusOK, rs)
	return nil
}

func (s *Server) getRental(c *call) error {
	m := s.rentals
	r, err := m.Get(c.principal.OrgID, c.params.get("id"))
	if err != nil {
		return err
	}
	writeJSON(c.ctx, http.StatusOK, r)
	return nil
}

func (s *Server) stopRental(c *call) error {
	m := s.rentals
	ctx, cancel := rentalContext()
	defer cancel()
	r, err := m.Stop(ctx, c.principal.OrgID, c.params.get("id"))
	if err != nil {
		return err
	}
	writeJSON(c.ctx, http.StatusOK, r)
	return nil
}

func (s *Server) rentalAudit(c *call) error {
	m := s.rentals
	p, err := m.Audit(c.principal.OrgID, c.params.get("id"))
	if err != nil {
		return err
	}
	writeJSON(c.ctx, http.StatusOK, p)
	return nil
}

func (s *Server) computeSpend(c *call) error {
	m := s.rentals
	rep, err := m.Spend(c.principal.OrgID)
	if err != nil {
		return err
	}
	writeJSON(c.ctx, http.StatusOK, rep)
	return nil
}
