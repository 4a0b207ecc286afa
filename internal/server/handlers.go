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

// pending answers 501 for a capability this server does not offer yet.
// Authentication, permissions and validation have already run, so callers
// see the final behaviour of everything but the answer itself.
func pending(what string) func(*call) error {
	return func(*call) error {
		return api.NotImplemented("This server does not offer %s yet", what)
	}
}
