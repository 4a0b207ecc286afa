package server

import (
	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/relay"
)

// refuse records req, turned away before it ran, with its usage row.
func (s *Server) refuse(c *call, req relay.Request, err error) {
	c.rowed = true
	// The row begins with the request, not the refusal: an upload the
	// client left halfway took its time.
	req.Started = c.ctx.Time()
	s.relay.Refuse(req, err)
}

// recordRefusal gives an inference request the gateway answered with err
// itself (a 422, an unreadable upload, a broken envelope, a 403 for a key
// that may not send it or for clear content an organisation requires
// sealed, and on a replica, a home it could not reach) its usage row, as
// the relay gives every request it took: an operator looking for why a
// client's requests fail finds them in the log beside those that reached
// a worker. A request with no known key (401) has no organisation to
// write to, and gets none, nor does a forwarded request refused as not at
// its home; each refusal costs one queued row, no more. The model is what
// the request named when the handler got as far as reading it, else what
// a scan of a body in memory finds, else "".
func (s *Server) recordRefusal(c *call, err error) {
	if c.route == nil || c.route.kind == "" || c.rowed || c.principal.OrgID == "" {
		return
	}
	if c.forwarded && api.ErrorOf(err).Code == api.CodeNotHome {
		// A forwarded request refused because this replica is not its
		// home is retried at the home, whose row it gets: one request,
		// one row.
		return
	}
	model, stream := c.model, false
	if c.bodyRead {
		if m, st, ok := relay.Route(c.ctx.PostBody()); ok {
			stream = st
			if model == "" {
				model = string(m)
			}
		}
	}
	s.refuse(c, inference(c, c.route.kind, model, stream), err)
}
