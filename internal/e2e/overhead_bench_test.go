package e2e

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"
)

// BenchmarkOverhead measures, in one run, the same requests sent straight
// to an engine (svc sim over HTTP) and through the gateway and a worker
// relaying to that engine with the openai adapter: the difference is what
// svc adds per request and per streamed chunk.
//
//	go test -run XXX -bench Overhead -benchtime 2000x ./internal/e2e/
func BenchmarkOverhead(b *testing.B) {
	s := startServer(b, "")
	key := s.adminKey()
	engine := startSim(b, "tps=0,ttft=0")
	startWorker(b, s.URL, s.tokenFile(), "bench", "--engine", "openai="+engine, "--max-concurrent", "64")

	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	targets := []struct {
		name, url, key string
	}{
		{"direct", engine, ""},
		{"gateway", s.URL, key},
	}
	post := func(url, key, body string) (*http.Response, error) {
		req, _ := http.NewRequest("POST", url+"/v1/chat/completions", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		return client.Do(req)
	}
	unary := `{"model":"sim-chat","messages":[{"role":"user","content":"hello\nsim: tokens=16"}]}`
	stream := `{"model":"sim-chat","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hello\nsim: tokens=50"}]}`

	for _, tg := range targets {
		b.Run("unary/"+tg.name, func(b *testing.B) {
			lat := make([]time.Duration, 0, b.N)
			for b.Loop() {
				start := time.Now()
				resp, err := post(tg.url, tg.key, unary)
				if err != nil {
					b.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					b.Fatalf("status %d", resp.StatusCode)
				}
				lat = append(lat, time.Since(start))
			}
			reportPercentiles(b, lat, "")
		})
	}
	for _, tg := range targets {
		b.Run("stream/"+tg.name, func(b *testing.B) {
			var ttfts, gaps []time.Duration
			for b.Loop() {
				start := time.Now()
				resp, err := post(tg.url, tg.key, stream)
				if err != nil {
					b.Fatal(err)
				}
				br := bufio.NewReader(resp.Body)
				last := time.Time{}
				for {
					line, err := br.ReadBytes('\n')
					if err != nil {
						break
					}
					if !bytes.HasPrefix(line, []byte("data: {")) || !bytes.Contains(line, []byte(`"content"`)) {
						continue
					}
					now := time.Now()
					if last.IsZero() {
						ttfts = append(ttfts, now.Sub(start))
					} else {
						gaps = append(gaps, now.Sub(last))
					}
					last = now
				}
				resp.Body.Close()
			}
			reportPercentiles(b, ttfts, "ttft-")
			reportPercentiles(b, gaps, "chunk-gap-")
		})
	}
}

func reportPercentiles(b *testing.B, d []time.Duration, prefix string) {
	if len(d) == 0 {
		return
	}
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	at := func(p float64) float64 { return float64(d[min(len(d)-1, int(p*float64(len(d))))].Microseconds()) }
	b.ReportMetric(at(0.50), prefix+"p50-µs")
	b.ReportMetric(at(0.99), prefix+"p99-µs")
}
