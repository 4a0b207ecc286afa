package server

import (
	"context"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/svc-dev/svc/internal/account"
	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/bolt"
	"github.com/svc-dev/svc/internal/buildinfo"
	"github.com/svc-dev/svc/internal/fleet"
)

// The gateway's own work for a request refused at admission, from its
// parsed head to its written-out answer: what every refusal under overload
// pays besides the socket's read and write (which the bench's
// refusal-cost scenario adds). The server is the one `svc serve` builds,
// with its store, accounts and usage rows; the model's one worker slot is
// busy and its queue has refused, so every request is turned away before
// its body is parsed.
func BenchmarkRefusedRequest(b *testing.B) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	log := slog.New(slog.DiscardHandler)
	st, err := bolt.Open(b.TempDir(), bolt.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	w := st.NewWriter(bolt.WriterOptions{Logger: log})
	wctx, stopWriter := context.WithCancel(context.Background())
	written := make(chan error, 1)
	go func() { written <- w.Run(wctx) }()
	defer func() { stopWriter(); <-written }()
	accounts, err := account.New(st, account.Options{Logger: log})
	if err != nil {
		b.Fatal(err)
	}
	var key string
	if _, err := accounts.Bootstrap(func(s account.Secrets) error { key = s.AdminKey; return nil }); err != nil {
		b.Fatal(err)
	}
	p, err := accounts.Authenticate(key)
	if err != nil {
		b.Fatal(err)
	}
	const hold = 20 * time.Millisecond
	f := fleet.New(fleet.Config{Logger: log, Hold: hold})
	s := New(Deps{Logger: log, Build: buildinfo.Info{}, Accounts: accounts, Fleet: f, Usage: st.Usage(w), Writes: w,
		Power: NewPowerBook(st.Power(w), log)})
	connectWorker(b, ctx, f, p.OrgID, 1, api.Model{ID: "m", Capabilities: []string{api.CapChat}, Engine: "sim"})
	defer backUp(b, ctx, f, p.OrgID, "m", hold)()

	var req fasthttp.Request
	req.Header.SetMethod(fasthttp.MethodPost)
	req.Header.SetRequestURI("/v1/chat/completions")
	req.Header.SetHost("gateway")
	req.Header.SetContentType("application/json")
	req.Header.Set("Authorization", "Bearer "+key)
	req.SetBodyString(`{"model":"m","messages":[{"role":"user","content":"What is the capital of France?"}],"max_tokens":64}`)
	addr := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 40000}
	handler := s.public.srv.Handler
	var rc fasthttp.RequestCtx
	b.ReportAllocs()
	for b.Loop() {
		// Init copies the request in, as fasthttp's read of a head would
		// fill it: a few percent of the figure is that copy.
		rc.Init(&req, addr, nil)
		handler(&rc)
		if rc.Response.StatusCode() != fasthttp.StatusTooManyRequests {
			b.Fatalf("status %d: %s", rc.Response.StatusCode(), rc.Response.Body())
		}
		rc.Response.Reset()
	}
}
