package client

import (
	"context"
	"net/http"
	"net/url"

	"github.com/svc-dev/svc/internal/api"
)

// GPU rental: /api/v1/compute, which needs the compute:write permission
// (renting and stopping also the owner or operator role).

const computePrefix = "/api/v1/compute"

func instancePath(id string, rest ...string) string {
	p := computePrefix + "/instances/" + url.PathEscape(id)
	for _, r := range rest {
		p += "/" + r
	}
	return p
}

// Catalogue lists the GPUs that can be rented, with a price per
// jurisdiction tier.
func (c *Client) Catalogue(ctx context.Context) ([]api.CatalogueEntry, error) {
	var out []api.CatalogueEntry
	err := c.Do(ctx, http.MethodGet, computePrefix+"/catalogue", nil, &out)
	return out, err
}

// RentableModels lists the models a rental can pre-install, with their
// variants.
func (c *Client) RentableModels(ctx context.Context) ([]api.RentableModel, error) {
	var out []api.RentableModel
	err := c.Do(ctx, http.MethodGet, computePrefix+"/models", nil, &out)
	return out, err
}

// Rent asks for a GPU; the rental comes back provisioning. The gateway
// allows one call a minute per key, failed ones included, so a caller must
// not retry it blindly: after a 429, list the rentals first.
func (c *Client) Rent(ctx context.Context, req api.RentRequest) (api.Rental, error) {
	var out api.Rental
	err := c.Do(ctx, http.MethodPost, computePrefix+"/instances", req, &out)
	return out, err
}

// Rentals lists the organisation's rentals, newest first.
func (c *Client) Rentals(ctx context.Context) ([]api.Rental, error) {
	var out []api.Rental
	err := c.Do(ctx, http.MethodGet, computePrefix+"/instances", nil, &out)
	return out, err
}

// Rental reads one rental.
func (c *Client) Rental(ctx context.Context, id string) (api.Rental, error) {
	var out api.Rental
	err := c.Do(ctx, http.MethodGet, instancePath(id), nil, &out)
	return out, err
}

// StopRental stops a rental: its machine is destroyed and billing ends.
func (c *Client) StopRental(ctx context.Context, id string) (api.Rental, error) {
	var out api.Rental
	err := c.Do(ctx, http.MethodDelete, instancePath(id), nil, &out)
	return out, err
}

// RentalAudit is where a rental was placed and what happened to it; 404
// until it has been placed.
func (c *Client) RentalAudit(ctx context.Context, id string) (api.Placement, error) {
	var out api.Placement
	err := c.Do(ctx, http.MethodGet, instancePath(id, "audit"), nil, &out)
	return out, err
}

// Spend is the current calendar month's (UTC) rental spend.
func (c *Client) Spend(ctx context.Context) (api.SpendReport, error) {
	var out api.SpendReport
	err := c.Do(ctx, http.MethodGet, computePrefix+"/spend", nil, &out)
	return out, err
}
