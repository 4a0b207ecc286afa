package server

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/buildinfo"
	"github.com/svc-dev/svc/internal/chat"
	"github.com/svc-dev/svc/internal/fleet"
	"github.com/svc-dev/svc/internal/relay"
)

// The cost of refusing a request for a backed-up model: before its body is
// parsed (admitted), and after the parse and the setup to run it, in the
// fleet's Acquire, as every refusal cost before.
func BenchmarkRefusal(b *testing.B) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const hold = 20 * time.Millisecond
	f := fleet.New(fleet.Config{Hold: hold})
	connectWorker(b, ctx, f, "", 1, api.Model{ID: "m", Capabilities: []string{api.CapChat}, Engine: "sim"})
	defer backUp(b, ctx, f, "", "m", hold)()
	s := &Server{log: slog.New(slog.DiscardHandler), metrics: newMetrics(buildinfo.Info{}), fleet: f,
		relay: relay.New(relay.Config{Fleet: f, Usage: &discardRows{}})}
	body := []byte(`{"model":"m","stream":true,"max_tokens":256,"temperature":0.7,"messages":[` +
		`{"role":"system","content":"You are a helpful assistant. ` + strings.Repeat("Answer briefly and cite sources. ", 20) + `"},` +
		`{"role":"user","content":"` + strings.Repeat("What is the capital of France? ", 20) + `"}]}`)
	refused := func(b *testing.B, err error) {
		if ae, ok := err.(*api.Error); !ok || ae.Kind != api.KindCapacity {
			b.Fatalf("err = %v", err)
		}
	}

	b.Run("admitted", func(b *testing.B) {
		var rc fasthttp.RequestCtx
		rc.Request.Header.SetMethod("POST")
		rc.Request.Header.SetContentType("application/json")
		rc.Request.SetBody(body)
		h := s.admitted(api.KindChat, false, nil, func(*call) error {
			b.Fatal("the request was let through")
			return nil
		})
		b.ReportAllocs()
		for b.Loop() {
			c := call{ctx: &rc, requestID: "req"}
			refused(b, h(&c))
		}
	})
	b.Run("parsed", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			req, err := chat.Parse(body, chat.Options{})
			if err != nil {
				b.Fatal(err)
			}
			r := relay.Request{ID: "req", Kind: api.KindChat, Model: req.Model, Stream: req.Stream,
				Chat: req, Body: req.Body, Affinity: relay.Affinity(req.Model, req.Messages)}
			r.ModelInfo = f.Model("", req.Model)
			_, err = s.relay.Start(r).Stream()
			refused(b, err)
		}
	})
}

type discardRows struct{}

func (discardRows) Record(string, api.UsageRow) {}
