package server

import (
	"net/http"

	"github.com/svc-dev/svc/internal/api"
)

func (s *Server) health(c *call) error {
	writeJSON(c.ctx, http.StatusOK, api.Health{Status: "ok", Version: s.build.Version})
	return nil
}

// latestVersion answers with this gateway's release: gateway and worker are
// one binary, so no worker release newer than the gateway's is known to it.
func (s *Server) latestVersion(c *call) error {
	writeJSON(c.ctx, http.StatusOK, map[string]string{"version": s.build.Version})
	return nil
}
