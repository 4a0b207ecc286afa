package relay

import (
	"bytes"
	"encoding/json"
	"math"
	"testing"
	"time"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/fleet"
)

// refSvcReply, refSvcWorker and refUsage are the svc object and usage as
// encoding/json wrote them: the bytes the hand-written ones must match.
type refSvcReply struct {
	Worker       *refSvcWorker   `json:"worker,omitempty"`
	RequestID    string          `json:"request_id,omitempty"`
	Timing       *api.Timing     `json:"timing,omitempty"`
	Notice       *api.Notice     `json:"notice,omitempty"`
	WebToolSteps json.RawMessage `json:"web_tool_steps,omitempty"`
}

type refSvcWorker struct {
	ID      string  `json:"id"`
	Name    *string `json:"name"`
	Version *string `json:"version"`
}

func (c *Call) refSvcWorker() *refSvcWorker {
	w := c.lease.Worker
	out := &refSvcWorker{ID: w.ID}
	if w.Name != "" {
		out.Name = &w.Name
	}
	if w.Version != "" {
		out.Version = &w.Version
	}
	return out
}

func refUsage(u api.Usage) map[string]any {
	out := map[string]any{"prompt_tokens": u.PromptTokens, "completion_tokens": u.CompletionTokens, "total_tokens": u.TotalTokens}
	if u.CachedTokens != nil && *u.CachedTokens > 0 {
		out["prompt_tokens_details"] = map[string]any{"cached_tokens": *u.CachedTokens}
	}
	if u.ReasoningTokens != nil {
		out["completion_tokens_details"] = map[string]any{"reasoning_tokens": *u.ReasoningTokens}
	}
	return out
}

// finalChunksMarshalled is finalChunks as it was, built from maps.
func (c *Call) finalChunksMarshalled(created int64) [][]byte {
	if c.req.E2E {
		b, _ := json.Marshal(map[string]any{"svc": refSvcReply{Worker: c.refSvcWorker(), RequestID: c.req.ID}})
		return [][]byte{b}
	}
	id := c.chunkID
	if id == "" {
		id = "chatcmpl-" + c.req.ID
	}
	chunk := func(extra map[string]any) []byte {
		m := map[string]any{"id": id, "object": "chat.completion.chunk", "created": created, "model": c.req.Model, "choices": []any{}}
		for k, v := range extra {
			m[k] = v
		}
		b, _ := json.Marshal(m)
		return b
	}
	u, _ := c.reportedUsage()
	out := [][]byte{chunk(map[string]any{"usage": refUsage(u)})}
	if n := c.replyNotice(); n != nil {
		out = append(out, chunk(map[string]any{"svc": refSvcReply{Notice: n}}))
	}
	out = append(out, chunk(map[string]any{"svc": refSvcReply{Worker: c.refSvcWorker(), RequestID: c.req.ID, Timing: c.timing()}}))
	return out
}

func TestFinalChunksAsBefore(t *testing.T) {
	zero, one := 0, 1
	calls := map[string]func(c *Call){
		"engine usage": func(c *Call) {},
		"estimated":    func(c *Call) { c.res = nil; c.outChars = 97 },
		"no cached":    func(c *Call) { c.res.Usage.CachedTokens = &zero; c.res.Usage.ReasoningTokens = nil },
		"sealed":       func(c *Call) { c.req.E2E = true },
		"chunk id":     func(c *Call) { c.chunkID = `chatcmpl-<x>&"y"` },
		"odd names":    func(c *Call) { c.req.Model = "m\u2028\xff\t<b>"; c.lease.Worker = fleet.WorkerInfo{ID: "w"} },
		"notice":       func(c *Call) { c.req.Chat.JSONMode = "json_object"; c.first.finish = "length" },
		"all timing": func(c *Call) {
			f := 1e-7
			b := true
			c.res.Timing.DraftAcceptanceRate, c.res.Timing.ModelLoadMs, c.res.Timing.ColdStart = &f, &f, &b
		},
		"reasoning only": func(c *Call) { c.res.Usage.CachedTokens = &one; c.res.Usage.ReasoningTokens = &zero },
	}
	for name, set := range calls {
		c, was := benchCall(), benchCall()
		set(c)
		set(was)
		got, want := c.finalChunksAt(1767225600), was.finalChunksMarshalled(1767225600)
		if len(got) != len(want) {
			t.Fatalf("%s: %d chunks, was %d", name, len(got), len(want))
		}
		for i := range got {
			if !bytes.Equal(got[i], want[i]) {
				t.Errorf("%s chunk %d:\ngot %s\nwas %s", name, i, got[i], want[i])
			}
		}
	}
}

func FuzzSvcJSON(f *testing.F) {
	f.Add("w-1", "gpu", "", "req-1", "code", "msg <&>", 182.4, 1e-7, false, []byte(`[ {"a": "<b>"} ]`))
	f.Add("", "\xff", "\u2028", "", "", "\x00\x1f\"\\", 1e21, math.Copysign(0, -1), true, []byte(nil))
	f.Fuzz(func(t *testing.T, id, name, version, reqID, code, message string, x, y float64, cold bool, steps []byte) {
		if math.IsNaN(x) || math.IsInf(x, 0) || math.IsNaN(y) || math.IsInf(y, 0) || len(steps) > 0 && !json.Valid(steps) {
			t.Skip()
		}
		timing := &api.Timing{TTFTMs: &x, QueueWaitMs: &y, ColdStart: &cold}
		notice := &api.Notice{Code: code, Message: message}
		c := &Call{lease: &fleet.Lease{Worker: fleet.WorkerInfo{ID: id, Name: name, Version: version}}}
		for _, r := range []svcReply{
			{Worker: &c.lease.Worker, RequestID: reqID, Timing: timing, Notice: notice, WebToolSteps: steps},
			{Notice: notice},
			{Timing: &api.Timing{}},
			{},
		} {
			ref := refSvcReply{RequestID: r.RequestID, Timing: r.Timing, Notice: r.Notice, WebToolSteps: r.WebToolSteps}
			if r.Worker != nil {
				ref.Worker = c.refSvcWorker()
			}
			want, err := json.Marshal(ref)
			if err != nil {
				t.Fatal(err)
			}
			if got := appendSvc(nil, r); !bytes.Equal(got, want) {
				t.Fatalf("got %s\nwas %s", got, want)
			}
		}
	})
}

func TestFinalChunksStampTheTime(t *testing.T) {
	before := time.Now().Unix()
	var m struct{ Created int64 }
	if err := json.Unmarshal(benchCall().finalChunks()[0], &m); err != nil || m.Created < before || m.Created > time.Now().Unix() {
		t.Fatalf("created %d, %v", m.Created, err)
	}
}
