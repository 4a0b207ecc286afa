package relay

import (
	"encoding/json"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/fleet"
	"github.com/svc-dev/svc/internal/jsontext"
)

// What the gateway adds to replies is written by hand rather than through
// maps and encoding/json: a stream's final chunks and a reply's svc object
// are built for every request. The bytes are encoding/json's: members in
// the order it wrote them (sorted, for what were maps), strings escaped
// the same, HTML characters included, numbers formatted the same.

// svcReply is the svc object of a reply; members left zero are left out.
type svcReply struct {
	Worker       *fleet.WorkerInfo
	RequestID    string
	Timing       *api.Timing
	Notice       *api.Notice
	WebToolSteps json.RawMessage
}

func appendSvc(b []byte, r svcReply) []byte {
	b = append(b, '{')
	start := len(b)
	member := func(name string) {
		if len(b) > start {
			b = append(b, ',')
		}
		b = append(b, '"')
		b = append(b, name...)
		b = append(b, '"', ':')
	}
	if w := r.Worker; w != nil {
		member("worker")
		b = append(b, `{"id":`...)
		b = jsontext.AppendString(b, w.ID)
		b = append(b, `,"name":`...)
		b = appendNullString(b, w.Name)
		b = append(b, `,"version":`...)
		b = appendNullString(b, w.Version)
		b = append(b, '}')
	}
	if r.RequestID != "" {
		member("request_id")
		b = jsontext.AppendString(b, r.RequestID)
	}
	if r.Timing != nil {
		member("timing")
		b = r.Timing.AppendJSON(b)
	}
	if n := r.Notice; n != nil {
		member("notice")
		b = append(b, `{"code":`...)
		b = jsontext.AppendString(b, n.Code)
		b = append(b, `,"message":`...)
		b = jsontext.AppendString(b, n.Message)
		b = append(b, '}')
	}
	if len(r.WebToolSteps) > 0 {
		// The engine's JSON, compacted and escaped as encoding/json
		// passes on a RawMessage; checked when the answer was read.
		steps, _ := json.Marshal(r.WebToolSteps)
		member("web_tool_steps")
		b = append(b, steps...)
	}
	return append(b, '}')
}

func appendNullString(b []byte, s string) []byte {
	if s == "" {
		return append(b, "null"...)
	}
	return jsontext.AppendString(b, s)
}
