package client

import (
	"context"
	"net/http"
	"net/url"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/money"
)

// Console API: only reachable through the admin socket (NewSocket).

const consolePrefix = "/api/v1/console"

func orgPath(org string, rest ...string) string {
	p := consolePrefix + "/orgs/" + url.PathEscape(org)
	for _, r := range rest {
		p += "/" + url.PathEscape(r)
	}
	return p
}

// ListOrgs lists every organisation.
func (c *Client) ListOrgs(ctx context.Context) ([]api.Organization, error) {
	var out struct {
		Orgs []api.Organization `json:"orgs"`
	}
	err := c.Do(ctx, http.MethodGet, consolePrefix+"/orgs", nil, &out)
	return out.Orgs, err
}

// CreateOrg adds an organisation.
func (c *Client) CreateOrg(ctx context.Context, req api.CreateOrgRequest) (api.Organization, error) {
	var out api.Organization
	err := c.Do(ctx, http.MethodPost, consolePrefix+"/orgs", req, &out)
	return out, err
}

// Org reads one organisation.
func (c *Client) Org(ctx context.Context, org string) (api.Organization, error) {
	var out api.Organization
	err := c.Do(ctx, http.MethodGet, orgPath(org), nil, &out)
	return out, err
}

// UpdateOrg changes the plan or settings present in p.
func (c *Client) UpdateOrg(ctx context.Context, org string, p api.OrgPatch) (api.Organization, error) {
	var out api.Organization
	err := c.Do(ctx, http.MethodPatch, orgPath(org), p, &out)
	return out, err
}

// AddCredit adds (or with a negative amount takes away) credit.
func (c *Client) AddCredit(ctx context.Context, org string, amount money.GBP) (api.Organization, error) {
	var out api.Organization
	err := c.Do(ctx, http.MethodPost, orgPath(org, "credit"), api.CreditRequest{AmountGBP: amount}, &out)
	return out, err
}

// ListUsers lists every user.
func (c *Client) ListUsers(ctx context.Context) ([]api.User, error) {
	var out struct {
		Users []api.User `json:"users"`
	}
	err := c.Do(ctx, http.MethodGet, consolePrefix+"/users", nil, &out)
	return out.Users, err
}

// CreateUser adds a user.
func (c *Client) CreateUser(ctx context.Context, name string) (api.User, error) {
	var out api.User
	err := c.Do(ctx, http.MethodPost, consolePrefix+"/users", api.CreateUserRequest{Name: name}, &out)
	return out, err
}

// Members lists an organisation's members.
func (c *Client) Members(ctx context.Context, org string) ([]api.Member, error) {
	var out struct {
		Members []api.Member `json:"members"`
	}
	err := c.Do(ctx, http.MethodGet, orgPath(org, "members"), nil, &out)
	return out.Members, err
}

// SetMember gives a user a role in an organisation.
func (c *Client) SetMember(ctx context.Context, org, user, role string) (api.Member, error) {
	var out api.Member
	err := c.Do(ctx, http.MethodPut, orgPath(org, "members", user), api.SetMemberRequest{Role: role}, &out)
	return out, err
}

// RemoveMember takes a user out of an organisation, revoking their keys there.
func (c *Client) RemoveMember(ctx context.Context, org, user string) error {
	return c.Do(ctx, http.MethodDelete, orgPath(org, "members", user), nil, nil)
}

// ListKeys lists an organisation's API keys.
func (c *Client) ListKeys(ctx context.Context, org string) ([]api.APIKey, error) {
	var out struct {
		Keys []api.APIKey `json:"keys"`
	}
	err := c.Do(ctx, http.MethodGet, orgPath(org, "keys"), nil, &out)
	return out.Keys, err
}

// CreateKey makes an API key; the answer holds its secret, shown only now.
func (c *Client) CreateKey(ctx context.Context, org string, req api.CreateKeyRequest) (api.APIKey, error) {
	var out api.APIKey
	err := c.Do(ctx, http.MethodPost, orgPath(org, "keys"), req, &out)
	return out, err
}

// RevokeKey revokes an API key by id or prefix.
func (c *Client) RevokeKey(ctx context.Context, org, id string) (api.APIKey, error) {
	var out api.APIKey
	err := c.Do(ctx, http.MethodDelete, orgPath(org, "keys", id), nil, &out)
	return out, err
}

// ListWorkerTokens lists an organisation's worker tokens.
func (c *Client) ListWorkerTokens(ctx context.Context, org string) ([]api.WorkerToken, error) {
	var out struct {
		Tokens []api.WorkerToken `json:"worker_tokens"`
	}
	err := c.Do(ctx, http.MethodGet, orgPath(org, "worker-tokens"), nil, &out)
	return out.Tokens, err
}

// CreateWorkerToken makes a worker token; the answer holds its secret.
func (c *Client) CreateWorkerToken(ctx context.Context, org, name string) (api.WorkerToken, error) {
	var out api.WorkerToken
	err := c.Do(ctx, http.MethodPost, orgPath(org, "worker-tokens"), api.CreateWorkerTokenRequest{Name: name}, &out)
	return out, err
}

// RevokeWorkerToken revokes a worker token by id or prefix.
func (c *Client) RevokeWorkerToken(ctx context.Context, org, id string) (api.WorkerToken, error) {
	var out api.WorkerToken
	err := c.Do(ctx, http.MethodDelete, orgPath(org, "worker-tokens", id), nil, &out)
	return out, err
}

// ApproveWorker approves a worker, by name or id, so that it serves while
// the organisation requires worker approval.
func (c *Client) ApproveWorker(ctx context.Context, org, worker string) (api.WorkerApproval, error) {
	var out api.WorkerApproval
	err := c.Do(ctx, http.MethodPost, orgPath(org, "workers", "approve"), api.ApproveWorkerRequest{Worker: worker}, &out)
	return out, err
}
