package server

import (
	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/relay"
)

// admitted refuses a request for a model whose queue is backed up before
// next parses its body, with the 429 the fleet would give it after: under
// overload most requests are refused, and parsing each, then setting it up
// to run, only to refuse it, would spend the gateway's CPU on requests it
// turns away. The refusal still gets its usage row, as one from the fleet
// does, so a client sees its 429s in its logs whichever path answered
// them; the row is queued, never written in line. A request the scan
// cannot read, a sealed one (its model is in the envelope, and it is
// pinned to its key's worker) and a pinned one go the full path. The fleet
// is asked about the need the relay would ask for, content filter and all,
// so that the answer is Acquire's; shape, when set, gives the refusal the
// endpoint's own error code. On a route whose streams are the chat
// completions events (framed), a streamed request is refused as a late
// capacity 429 is: a 200 whose one event is the error, then [DONE], the
// form its client handles whenever every worker is busy.
func (s *Server) admitted(kind string, framed bool, shape func(error) error, next func(*call) error) func(*call) error {
	return func(c *call) error {
		if !s.fleet.Queued() || sealed(c) {
			// Nothing waits, so nothing is backed up: no scan.
			return next(c)
		}
		model, stream, ok := relay.Route(c.ctx.PostBody())
		if !ok {
			return next(c)
		}
		r := inference(c, kind, string(model), stream)
		switch kind {
		case api.KindChat:
			r.ContentFilter = s.contentFilter(c)
		case api.KindModeration:
			r.Feature = api.FeatureModeration
		}
		err := s.fleet.Admit(relay.NeedOf(r))
		if err == nil {
			return next(c)
		}
		if shape != nil {
			err = shape(err)
		}
		s.refuse(c, r, err)
		if framed && stream {
			refuseInStream(c, err)
			return nil
		}
		return err
	}
}

// refuseInStream answers a streamed request with err as its stream's one
// event, then [DONE].
func refuseInStream(c *call, err error) {
	startEvents(c)
	body := append([]byte("data: "), inReplyError(err, formStreamEvent)...)
	c.ctx.SetBody(append(body, "\n\ndata: [DONE]\n\n"...))
}
