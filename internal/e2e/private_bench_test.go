package e2e

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/svc-dev/svc/e2ee"
)

// BenchmarkPrivate measures what encryption adds: the same chat, whole and
// streamed (200 chunks), sent in the clear and sealed through the same
// gateway and worker, in one run. The per-chunk figure is the streamed
// difference over the chunks.
//
//	go test ./internal/e2e -run '^$' -bench Private -benchtime 200x
func BenchmarkPrivate(b *testing.B) {
	s := startServer(b, "")
	key := s.adminKey()
	startWorker(b, s.URL, s.tokenFile(), "bench", "--engine", "sim=tps=0,ttft=0", "--max-concurrent", "8")
	clear := &http.Client{}
	sealed := &http.Client{Transport: e2ee.NewTransport(http.DefaultTransport, e2ee.Directory{})}
	bodies := map[string]string{
		"unary":  `{"model":"sim-chat","messages":[{"role":"user","content":"hello\nsim: tokens=16"}]}`,
		"stream": `{"model":"sim-chat","stream":true,"messages":[{"role":"user","content":"hello\nsim: tokens=200"}]}`,
	}
	for _, kind := range []string{"unary", "stream"} {
		for _, mode := range []struct {
			name string
			hc   *http.Client
		}{{"clear", clear}, {"sealed", sealed}} {
			b.Run(kind+"/"+mode.name, func(b *testing.B) {
				lat := make([]time.Duration, 0, b.N)
				for b.Loop() {
					start := time.Now()
					req, _ := http.NewRequest("POST", s.URL+"/v1/chat/completions", strings.NewReader(bodies[kind]))
					req.Header.Set("Content-Type", "application/json")
					req.Header.Set("Authorization", "Bearer "+key)
					resp, err := mode.hc.Do(req)
					if err != nil {
						b.Fatal(err)
					}
					_, err = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if err != nil || resp.StatusCode != 200 {
						b.Fatalf("status %d, %v", resp.StatusCode, err)
					}
					lat = append(lat, time.Since(start))
				}
				reportPercentiles(b, lat, "")
			})
		}
	}
}
