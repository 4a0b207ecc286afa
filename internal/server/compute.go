package server

import (
	"net/http"

	"github.com/svc-dev/svc/internal/api"
)

// The GPU rental endpoints: thin over the rental manager, which holds
// the rules.

func (s *Server) computeCatalogue(c *call) error {
	writeJSON(c.ctx, http.StatusOK, s.rentals.Catalogue(c.ctx, c.principal.OrgID))
	return nil
}

func (s *Server) computeModels(c *call) error {
	writeJSON(c.ctx, http.StatusOK, s.rentals.Models())
	return nil
}

func (s *Server) rent(c *call) error {
	// The rate limit counts every call, a malformed one too.
	if err := s.rentals.Allow(c.principal.KeyID); err != nil {
		return err
	}
	var req api.RentRequest
	if err := decodeJSON(c.ctx.PostBody(), &req); err != nil {
		return err
	}
	r, err := s.rentals.Rent(c.ctx, c.principal, req)
	if err != nil {
		return err
	}
	writeJSON(c.ctx, http.StatusAccepted, r)
	return nil
}

func (s *Server) listRentals(c *call) error {
	writeJSON(c.ctx, http.StatusOK, s.rentals.List(c.principal.OrgID))
	return nil
}

func (s *Server) getRental(c *call) error {
	r, err := s.rentals.Get(c.principal.OrgID, c.params.get("id"))
	if err != nil {
		return err
	}
	writeJSON(c.ctx, http.StatusOK, r)
	return nil
}

func (s *Server) stopRental(c *call) error {
	r, err := s.rentals.Stop(c.ctx, c.principal.OrgID, c.params.get("id"))
	if err != nil {
		return err
	}
	writeJSON(c.ctx, http.StatusOK, r)
	return nil
}

func (s *Server) rentalAudit(c *call) error {
	p, err := s.rentals.Audit(c.principal.OrgID, c.params.get("id"))
	if err != nil {
		return err
	}
	writeJSON(c.ctx, http.StatusOK, p)
	return nil
}

func (s *Server) computeSpend(c *call) error {
	writeJSON(c.ctx, http.StatusOK, s.rentals.Spend(c.principal.OrgID))
	return nil
}
