package server

import (
	"net/http"

	"github.com/svc-dev/svc/internal/api"
)

// health answers 200 while the gateway runs, degraded while the store
// cannot write (see api.Health).
func (s *Server) health(c *call) error {
	h := api.Health{Status: api.HealthOK, Version: s.build.Version}
	if s.writes != nil {
		h.Store = storeHealth(s.writes.Backlog())
		if h.Store.State != api.StoreOK {
			h.Status = api.HealthDegraded
		}
	}
	h.Cluster = s.clusterHealth()
	writeJSON(c.ctx, http.StatusOK, h)
	return nil
}

// latestVersion answers with this gateway's release: gateway and worker are
// one binary, so no worker release newer than the gateway's is known to it.
func (s *Server) latestVersion(c *call) error {
	writeJSON(c.ctx, http.StatusOK, map[string]string{"version": s.build.Version})
	return nil
}
