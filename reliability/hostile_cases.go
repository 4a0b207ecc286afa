package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"strings"
	"sync"

	svcserver "github.com/svc-dev/svc/internal/server"
)

var (
	badRequest = []int{400}
	invalid    = []int{400, 422}
	forbidden  = []int{403}
	// tooLongURL: a production gateway answers 414 for a request line over
	// its buffer; 431 (headers too large) is accepted as the same refusal.
	tooLongURL     = []int{414, 431}
	headersTooBig  = []int{431}
	entityTooLarge = []int{413}
)

// chatJSON is a valid chat body with extra raw JSON fields spliced in.
func chatJSON(extra string) string {
	s := `{"model":"sim-chat","messages":[{"role":"user","content":"hi"}]`
	if extra != "" {
		s += "," + extra
	}
	return s + "}"
}

// jsonBodies sends broken JSON of every kind to every route, with the
// key and without.
func (hc *hostile) jsonBodies(ctx context.Context) {
	deep := 100_000
	valid := chatJSON("")
	type body struct {
		category, name, text string
		strict               []int // on a JSON route with a key
	}
	bodies := []body{
		{"malformed JSON", "open brace", "{", badRequest},
		{"malformed JSON", "missing value", `{"model":}`, badRequest},
		{"malformed JSON", "missing colon", `{"model" "sim-chat"}`, badRequest},
		{"malformed JSON", "bare word", "not json", badRequest},
		{"malformed JSON", "single quotes", `{'model':'sim-chat'}`, badRequest},
		{"malformed JSON", "trailing comma", `{"model":"sim-chat",}`, badRequest},
		{"malformed JSON", "trailing data", valid + `{"x":1}`, badRequest},
		{"malformed JSON", "close first", "}{", badRequest},
		{"malformed JSON", "raw control byte", "{\"model\":\"a\x01b\"}", badRequest},
		{"malformed JSON", "empty body", "", badRequest},
		{"malformed JSON", "whitespace only", " \n\t ", badRequest},
		{"truncated JSON", "half", valid[:len(valid)/2], badRequest},
		{"truncated JSON", "last byte gone", valid[:len(valid)-1], badRequest},
		{"truncated JSON", "inside a string", valid[:12], badRequest},
		{"truncated JSON", "inside an escape", `{"model":"sim\`, badRequest},
		{"wrong types", "array", "[]", invalid},
		{"wrong types", "string", `"sim-chat"`, invalid},
		{"wrong types", "number", "42", invalid},
		{"wrong types", "null", "null", invalid},
		{"wrong types", "bool", "true", invalid},
		{"wrong types", "model number, messages string", `{"model":123,"messages":"hi"}`, invalid},
		{"wrong types", "role number, content object", `{"model":"sim-chat","messages":[{"role":7,"content":{"x":1}}]}`, invalid},
		{"wrong types", "stream string", chatJSON(`"stream":"yes","max_tokens":"ten","temperature":"hot"`), invalid},
		{"wrong types", "model array, input object", `{"model":["sim-chat"],"input":{}}`, invalid},
		{"wrong types", "name number, permissions string", `{"name":5,"permissions":"all","role":[]}`, invalid},
		{"wrong types", "messages of nulls", `{"model":"sim-chat","messages":[null,null]}`, invalid},
		{"deeply nested JSON", "100k arrays", strings.Repeat("[", deep) + strings.Repeat("]", deep), invalid},
		{"deeply nested JSON", "100k objects", strings.Repeat(`{"a":`, deep) + "1" + strings.Repeat("}", deep), invalid},
		{"deeply nested JSON", "100k unclosed arrays", strings.Repeat("[", deep), badRequest},
		{"deeply nested JSON", "deep in a forwarded field", chatJSON(`"tools":` + strings.Repeat("[", deep) + strings.Repeat("]", deep)), invalid},
		{"deeply nested JSON", "deep in content", `{"model":"sim-chat","messages":[{"role":"user","content":` + strings.Repeat(`{"a":`, deep) + "1" + strings.Repeat("}", deep) + `}]}`, invalid},
		{"huge numbers", "max_tokens 1e400", chatJSON(`"max_tokens":1e400`), nil},
		{"huge numbers", "max_tokens past int64", chatJSON(`"max_tokens":99999999999999999999999`), nil},
		{"huge numbers", "temperature 1e308", chatJSON(`"temperature":1e308`), nil},
		{"huge numbers", "seed below int64", chatJSON(`"seed":-9223372036854775809`), nil},
		{"huge numbers", "100k digits", chatJSON(`"max_tokens":` + strings.Repeat("9", 100_000)), nil},
		{"huge numbers", "negative max_tokens", chatJSON(`"max_tokens":-1,"top_k":1.5`), nil},
		{"huge numbers", "reasoning budget 1e19", chatJSON(`"reasoning":{"max_tokens":1e19}`), nil},
		{"huge numbers", "amount 1e400", `{"amount":1e400,"gbp":1e400,"hours":1e400}`, nil},
		{"duplicate keys", "model twice", `{"model":"sim-chat","model":"no-such-model","messages":[{"role":"user","content":"hi"}]}`, nil},
		{"duplicate keys", "messages twice, different types", `{"model":"sim-chat","messages":[{"role":"user","content":"hi"}],"messages":"x"}`, nil},
		{"duplicate keys", "stream twice", chatJSON(`"stream":true,"stream":false`), nil},
		{"duplicate keys", "input twice", `{"model":"sim-chat","input":"a","input":["b","c"]}`, nil},
	}
	var probes []probe
	for _, t := range hc.routes() {
		if t.route.Access == "worker" {
			continue // the websocket upgrade reads no body
		}
		if hc.g.h.short && strings.HasPrefix(t.path, "/v1/") {
			continue // the same handlers as /api/v1/
		}
		firstOf := map[string]bool{}
		for _, b := range bodies {
			keys := []string{hc.g.Key, ""}
			if hc.g.h.short && firstOf[b.category] {
				keys = keys[:1] // the key is checked before the body is read
			}
			firstOf[b.category] = true
			for _, key := range keys {
				allowed := noKey(t.route)
				if key != "" {
					allowed = hc.jsonAllowed(t, b.strict)
				}
				hdrs := append(bearer(key), "Content-Type: application/json")
				probes = append(probes, probe{category: b.category,
					label:   fmt.Sprintf("%s %s, %s, key %v", t.method, t.path, b.name, key != ""),
					raw:     request(t.method, t.path, []byte(b.text), hdrs...),
					allowed: allowed})
			}
		}
	}
	hc.parallel(ctx, probes)
}

// jsonAllowed is what a route with a valid key may answer a broken JSON
// body: strict on routes that read JSON, anything but a 5xx elsewhere.
func (hc *hostile) jsonAllowed(t target, strict []int) []int {
	switch {
	case t.route.Access == "console":
		return forbidden
	case t.route.Access == "peer":
		// An API key is not a replica's signature.
		return []int{401}
	case t.route.Access == "public":
		return nil
	case strings.HasSuffix(t.path, "/audio/transcriptions"):
		return []int{400, 415, 422}
	case !takesJSON(t) || strict == nil:
		return nil
	case strings.HasSuffix(t.path, "/compute/instances"):
		// One rental request per key per minute, broken or not.
		return append([]int{429}, strict...)
	}
	return strict
}

// pathParams fills every {param} with hostile values.
func (hc *hostile) pathParams(ctx context.Context) {
	values := []string{
		"%00", "%ff%fe", "..%2f..%2fetc%2fpasswd", "..", "%2e%2e", strings.Repeat("a", 4000),
		"%0d%0aX-Injected:%20yes", "%E2%80%AE", "'%20OR%201=1--", "%", "%zz", "%c0%af", "*", "%20",
		"svc_k_AAAAAAAAAAAA_" + strings.Repeat("x", 40),
	}
	var probes []probe
	for _, rt := range hc.routes() {
		if !strings.Contains(rt.route.Path, "{") {
			continue
		}
		for _, v := range values {
			path := rt.route.Path
			for _, p := range []string{"{worker_id}", "{id}", "{org}", "{user}"} {
				path = strings.ReplaceAll(path, p, v)
			}
			for _, key := range []string{hc.g.Key, ""} {
				// A value that changes the path's shape may name no
				// route at all: then 404, key or none.
				allowed := []int{401, 404}
				if key != "" {
					allowed = nil
					if rt.route.Access == "console" {
						allowed = []int{403, 404}
					}
				}
				var body []byte
				if rt.method != "GET" && rt.method != "DELETE" {
					body = []byte("{}")
				}
				probes = append(probes, probe{category: "hostile path parameters",
					label: fmt.Sprintf("%s %s, key %v", rt.method, path[:min(len(path), 120)], key != ""),
					raw:   request(rt.method, path, body, append(bearer(key), "Content-Type: application/json")...), allowed: allowed})
			}
		}
	}
	hc.parallel(ctx, probes)
}

// wrongMethods sends every path the methods it does not serve: 405 with
// Allow, key or none (the route is not found, so no key is asked for).
func (hc *hostile) wrongMethods(ctx context.Context) {
	served := map[string][]string{}
	for _, t := range hc.routes() {
		served[t.path] = append(served[t.path], t.method)
	}
	var probes []probe
	for path, methods := range served {
		for _, m := range []string{"GET", "POST", "PUT", "PATCH", "DELETE"} {
			if slices.Contains(methods, m) || (m == "HEAD" && slices.Contains(methods, "GET")) {
				continue
			}
			for _, key := range []string{hc.g.Key, ""} {
				probes = append(probes, probe{category: "wrong methods",
					label: fmt.Sprintf("%s %s, key %v", m, path, key != ""),
					raw:   request(m, path, []byte("{"), bearer(key)...), allowed: []int{405}})
			}
		}
	}
	hc.parallel(ctx, probes)
}

// badBytes puts invalid UTF-8 and NUL bytes in bodies, headers, paths and
// query values.
func (hc *hostile) badBytes(ctx context.Context) {
	const cat = "invalid UTF-8 and NUL"
	key := bearer(hc.g.Key)
	js := "Content-Type: application/json"
	var probes []probe
	add := func(label string, raw []byte, allowed []int) {
		probes = append(probes, probe{category: cat, label: label, raw: raw, allowed: allowed})
	}
	bodies := map[string]string{
		"invalid UTF-8 in content":    "{\"model\":\"sim-chat\",\"messages\":[{\"role\":\"user\",\"content\":\"\xff\xfe\xfd \xc3\x28\"}]}",
		"invalid UTF-8 in model":      "{\"model\":\"sim-chat\xff\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}",
		"escaped NUL in content":      `{"model":"sim-chat","messages":[{"role":"user","content":"a\u0000b"}]}`,
		"escaped NUL in model":        `{"model":"sim-chat\u0000","messages":[{"role":"user","content":"hi"}]}`,
		"escaped lone surrogate":      `{"model":"sim-chat","messages":[{"role":"user","content":"\ud800"}],"input":"\udfff"}`,
		"overlong UTF-8 in role":      "{\"model\":\"sim-chat\",\"messages\":[{\"role\":\"\xc0\xafuser\",\"content\":\"hi\"}]}",
		"invalid UTF-8 in field name": "{\"model\":\"sim-chat\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"\xff\":1}",
		"invalid UTF-8 in input":      "{\"model\":\"sim-chat\",\"input\":[\"\xff\",\"\x80\x80\"],\"voice\":\"\xfe\"}",
	}
	for _, path := range []string{"/v1/chat/completions", "/v1/embeddings", "/v1/moderations", "/v1/audio/speech", "/api/v1/compute/instances"} {
		for name, b := range bodies {
			add("POST "+path+", "+name, request("POST", path, []byte(b), append(key, js)...), nil)
		}
		malformed := hc.jsonAllowed(target{method: "POST", path: path, route: svcserver.RouteInfo{Access: "key"}}, badRequest)
		add("POST "+path+", raw NUL in a string", request("POST", path, []byte("{\"model\":\"sim\x00chat\"}"), append(key, js)...), malformed)
		add("POST "+path+", raw NUL body", request("POST", path, []byte("\x00\x00\x00\x00"), append(key, js)...), malformed)
		add("POST "+path+", UTF-16 body", request("POST", path, utf16(chatJSON("")), append(key, js)...), malformed)
		add("POST "+path+", UTF-8 BOM", request("POST", path, []byte("\xef\xbb\xbf"+chatJSON("")), append(key, js)...), malformed)
	}
	chat := []byte(chatJSON(""))
	for name, hdr := range map[string]string{
		"Authorization with invalid UTF-8": "Authorization: Bearer \xff\xfe\xfd",
		"Authorization with NUL":           "Authorization: Bearer " + hc.g.Key + "\x00",
		"x-api-key with invalid UTF-8":     "X-Api-Key: \xc3\x28",
	} {
		add("chat, "+name, request("POST", "/v1/chat/completions", chat, hdr, js), []int{400, 401})
	}
	for name, hdr := range map[string]string{
		"X-Svc-Worker-Id invalid UTF-8": "X-Svc-Worker-Id: \xff\xfe",
		"X-Svc-Worker-Id NUL":           "X-Svc-Worker-Id: a\x00b",
		"Content-Type invalid UTF-8":    "X-Other: \xff",
		"header value NUL":              "X-Note: a\x00b",
		"header name invalid UTF-8":     "X-\xff: 1",
		"header name NUL":               "X-\x00: 1",
		"Accept invalid UTF-8":          "Accept: application/json\xff",
		"X-Request-Id NUL":              "X-Request-Id: \x00",
	} {
		add("chat, "+name, request("POST", "/v1/chat/completions", chat, append(key, hdr, js)...), nil)
	}
	for _, path := range []string{
		"/v1/models\xff", "/v1/mo\x00dels", "/%00", "/api/v1/%ff%fe", "/api/v1/usage/logs\x00",
		"/v1/\xc0\xaf", "/api/v1/workers/\xff/power", "/\x00\x00\x00", "/v1/models%00",
	} {
		for _, k := range []string{hc.g.Key, ""} {
			add(fmt.Sprintf("GET %q, key %v", path, k != ""), request("GET", path, nil, bearer(k)...), nil)
		}
	}
	for _, q := range []string{
		"/api/v1/usage/logs?limit=%00", "/api/v1/usage/logs?limit=\xff", "/api/v1/usage/logs?limit=1%00",
		"/api/v1/usage/summary?days=%ff%fe", "/api/v1/usage/daily?days=\x00",
		"/api/v1/workers/" + hc.workerID + "/power?range=%ff",
		"/api/v1/workers/" + hc.workerID + "/power?range=1h%00",
	} {
		add("GET "+fmt.Sprintf("%q", q), request("GET", q, nil, key...), invalid)
	}
	for _, q := range []string{
		"/api/v1/usage/logs?worker_id=%00%ff", "/api/v1/usage/logs?worker_id=\xff\xfe", "/api/v1/usage/logs?model=\x00",
		"/api/v1/usage/logs?%ff=1", "/v1/models?\x00=\x00",
	} {
		add("GET "+fmt.Sprintf("%q", q), request("GET", q, nil, key...), nil)
	}
	hc.parallel(ctx, probes)
}

func utf16(s string) []byte {
	var b bytes.Buffer
	b.WriteString("\xff\xfe")
	for _, r := range s {
		_ = binary.Write(&b, binary.LittleEndian, uint16(r))
	}
	return b.Bytes()
}

// bigHeaders sends headers and URLs over the gateway's limits and many
// headers within them.
func (hc *hostile) bigHeaders(ctx context.Context) {
	key := bearer(hc.g.Key)
	var probes []probe
	add := func(cat, label string, raw []byte, allowed []int) {
		probes = append(probes, probe{category: cat, label: label, raw: raw, allowed: allowed})
	}
	for _, n := range []int{20 << 10, 64 << 10, 1 << 20} {
		for _, k := range []string{hc.g.Key, ""} {
			add("huge headers", fmt.Sprintf("one %d KB header, key %v", n>>10, k != ""),
				request("GET", "/v1/models", nil, append(bearer(k), "X-Big: "+strings.Repeat("a", n))...), headersTooBig)
		}
		add("huge headers", fmt.Sprintf("%d KB Authorization", n>>10),
			request("GET", "/v1/models", nil, "Authorization: Bearer "+strings.Repeat("k", n)), headersTooBig)
	}
	many := func(n int) []string {
		hs := append([]string(nil), key...)
		for i := range n {
			hs = append(hs, fmt.Sprintf("X-H%d: %d", i, i))
		}
		return hs
	}
	add("many headers", "300 headers, within the limit", request("GET", "/v1/models", nil, many(300)...), []int{200})
	add("many headers", "2,000 headers", request("GET", "/v1/models", nil, many(2000)...), headersTooBig)
	add("many headers", "20,000 headers", request("GET", "/v1/models", nil, many(20000)...), headersTooBig)
	add("many headers", "300 duplicate Authorization headers", request("GET", "/v1/models", nil, slices300("Authorization: Bearer "+hc.g.Key)...), nil)
	for _, n := range []int{20 << 10, 100 << 10, 1 << 20} {
		add("long URLs and query values", fmt.Sprintf("%d KB path", n>>10),
			request("GET", "/v1/models/"+strings.Repeat("a", n), nil, key...), tooLongURL)
		add("long URLs and query values", fmt.Sprintf("%d KB query value", n>>10),
			request("GET", "/api/v1/usage/logs?worker_id="+strings.Repeat("a", n), nil, key...), tooLongURL)
	}
	add("long URLs and query values", "8 KB worker_id, within the limit",
		request("GET", "/api/v1/usage/logs?worker_id="+strings.Repeat("a", 8<<10), nil, key...), []int{200})
	add("long URLs and query values", "8 KB offset, within the limit",
		request("GET", "/api/v1/usage/logs?offset="+strings.Repeat("a", 8<<10), nil, key...), invalid)
	add("long URLs and query values", "12 KB of digits in limit",
		request("GET", "/api/v1/usage/logs?limit="+strings.Repeat("9", 12<<10), nil, key...), invalid)
	add("long URLs and query values", "2,000 query parameters",
		request("GET", "/api/v1/usage/logs?"+strings.Repeat("limit=5&", 1000)+strings.Repeat("x=1&", 1000), nil, key...), nil)
	add("long URLs and query values", "8 KB path, within the limit",
		request("GET", "/v1/"+strings.Repeat("a", 8<<10), nil, key...), []int{404})
	hc.parallel(ctx, probes)
}

func slices300(line string) []string {
	out := make([]string, 300)
	for i := range out {
		out[i] = line
	}
	return out
}

// framing sends the request framings smuggling and broken clients use:
// Content-Length with Transfer-Encoding, duplicated or garbage lengths,
// broken chunks and header syntax. A framing the gateway cannot trust is
// a 400 and the connection is closed: a request smuggled behind it is
// never answered.
func (hc *hostile) framing(ctx context.Context) {
	const cat = "smuggling and framing"
	auth := "Authorization: Bearer " + hc.g.Key
	body := chatJSON("")
	smuggled := "GET /api/v1/smuggled-marker HTTP/1.1\r\nHost: hostile\r\n" + auth + "\r\n\r\n"
	head := "POST /v1/chat/completions HTTP/1.1\r\nHost: hostile\r\n" + auth + "\r\nContent-Type: application/json\r\n"
	chunked := fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len(body), body)
	// The last request closes a connection the gateway kept.
	last := "GET /healthz HTTP/1.1\r\nHost: hostile\r\nConnection: close\r\n\r\n"
	type frame struct {
		name, headers, body string
		allowed             []int
	}
	frames := []frame{
		{"CL then TE chunked", fmt.Sprintf("Content-Length: %d\r\nTransfer-Encoding: chunked\r\n", len(chunked)), chunked, badRequest},
		{"TE chunked then CL", fmt.Sprintf("Transfer-Encoding: chunked\r\nContent-Length: %d\r\n", len(chunked)), chunked, badRequest},
		{"CL.TE short CL", "Content-Length: 4\r\nTransfer-Encoding: chunked\r\n", chunked, badRequest},
		{"TE.CL zero chunk, long CL", fmt.Sprintf("Transfer-Encoding: chunked\r\nContent-Length: %d\r\n", len(chunked)+len(smuggled)), "0\r\n\r\n" + smuggled, badRequest},
		{"CL with TE identity", fmt.Sprintf("Content-Length: %d\r\nTransfer-Encoding: identity\r\n", len(body)), body, nil},
		{"TE chunked twice", "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n", chunked, nil},
		{"TE identity, chunked", "Transfer-Encoding: identity, chunked\r\n", chunked, nil},
		{"TE xchunked", "Transfer-Encoding: xchunked\r\n", chunked, nil},
		{"TE chunked with CL, tab", fmt.Sprintf("Content-Length: %d\r\nTransfer-Encoding:\tchunked\r\n", len(chunked)), chunked, badRequest},
		{"TE space before colon", "Transfer-Encoding : chunked\r\n", chunked, nil},
		{"duplicate CL, different", fmt.Sprintf("Content-Length: %d\r\nContent-Length: %d\r\n", len(body), len(body)+1), body, badRequest},
		{"duplicate CL, same", fmt.Sprintf("Content-Length: %d\r\nContent-Length: %d\r\n", len(body), len(body)), body, nil},
		{"CL list", fmt.Sprintf("Content-Length: %d, %d\r\n", len(body), len(body)), body, badRequest},
		{"CL negative", "Content-Length: -1\r\n", body, badRequest},
		{"CL -5", "Content-Length: -5\r\n", body, badRequest},
		{"CL garbage", "Content-Length: abc\r\n", body, badRequest},
		{"CL digits then garbage", "Content-Length: 5abc\r\n", body, badRequest},
		{"CL plus sign", fmt.Sprintf("Content-Length: +%d\r\n", len(body)), body, badRequest},
		{"CL hex", "Content-Length: 0x10\r\n", body, badRequest},
		{"CL past int64", "Content-Length: 99999999999999999999999\r\n", body, []int{400, 413}},
		{"CL empty", "Content-Length: \r\n", body, badRequest},
		{"chunk size garbage", "Transfer-Encoding: chunked\r\n", "zz\r\n" + body + "\r\n0\r\n\r\n", badRequest},
		{"chunk size overflow", "Transfer-Encoding: chunked\r\n", "fffffffffffffffffffff\r\n" + body + "\r\n0\r\n\r\n", []int{400, 413}},
		{"chunk size negative", "Transfer-Encoding: chunked\r\n", "-1\r\n" + body + "\r\n0\r\n\r\n", badRequest},
		{"chunk data without CRLF", "Transfer-Encoding: chunked\r\n", fmt.Sprintf("%x\r\n%sXX0\r\n\r\n", len(body), body), badRequest},
		{"chunk extension 20 KB", "Transfer-Encoding: chunked\r\n", fmt.Sprintf("%x;ext=%s\r\n%s\r\n0\r\n\r\n", len(body), strings.Repeat("e", 20<<10), body), nil},
		{"header without colon", fmt.Sprintf("Garbage\r\nContent-Length: %d\r\n", len(body)), body, badRequest},
		{"obs-fold header", fmt.Sprintf("X-A: a\r\n b\r\nContent-Length: %d\r\n", len(body)), body, nil},
		{"NUL in CL", fmt.Sprintf("Content-Length: %d\x00\r\n", len(body)), body, badRequest},
	}
	var wg sync.WaitGroup
	work := make(chan frame)
	for range 4 {
		wg.Go(func() {
			for f := range work {
				hc.framed(ctx, cat, f.name, head+f.headers+"\r\n"+f.body+smuggled+last, f.allowed)
			}
		})
	}
	for _, f := range frames {
		work <- f
	}
	for _, line := range []string{
		"GET /v1/models HTTP/1.1\r\nHost: hostile\r\n" + auth + "\r\n\r\n",                    // control: both answered
		"G\x00T /v1/models HTTP/1.1\r\nHost: hostile\r\n" + auth + "\r\n\r\n",                 // NUL in the method
		"GET /v1/models HTTP/1.1\nHost: hostile\n" + auth + "\n\n",                            // bare LF
		"GET  /v1/models  HTTP/1.1\r\nHost: hostile\r\n" + auth + "\r\n\r\n",                  // doubled spaces
		"GET /v1/models\r\nHost: hostile\r\n\r\n",                                             // no version
		"BREW /v1/models HTTP/1.1\r\nHost: hostile\r\n" + auth + "\r\n\r\n",                   // unknown method
		"GET http://evil.example/v1/models HTTP/1.1\r\nHost: hostile\r\n" + auth + "\r\n\r\n", // absolute form
	} {
		work <- frame{name: fmt.Sprintf("request line %q", line[:min(len(line), 40)]), body: "\x01" + line}
	}
	close(work)
	wg.Wait()
}

// framed sends one framing probe followed by a pipelined request that is
// smuggled if the gateway misreads the framing, and reads every answer.
func (hc *hostile) framed(ctx context.Context, cat, name, raw string, allowed []int) {
	if line, ok := strings.CutPrefix(raw, "\x01"); ok {
		// A request line probe: judged alone, anything but a 5xx.
		hc.send(ctx, probe{category: cat, label: name, raw: []byte(line + "GET /healthz HTTP/1.1\r\nHost: hostile\r\nConnection: close\r\n\r\n")})
		return
	}
	hc.count(cat)
	as, err := hc.exchangeN(ctx, "POST", strings.NewReader(raw), 4, hostileTimeout)
	if ctx.Err() != nil {
		return
	}
	if len(as) == 0 {
		hc.r.fail("%s: %s: no answer: %v", cat, name, err)
		return
	}
	hc.judge(cat, name, as[0], allowed)
	for _, a := range as[1:] {
		if bytes.Contains(a.body, []byte("smuggled-marker")) && as[0].status == 400 {
			hc.r.fail("%s: %s: the request behind a refused framing was answered (%d): the connection was kept", cat, name, a.status)
		}
		if a.status >= 500 {
			hc.r.fail("%s: %s: a later answer on the connection = %d %.200s", cat, name, a.status, a.body)
		}
	}
}

// wav is a valid mono 16 kHz 16-bit WAV file of n samples of silence.
func wav(n int) []byte {
	var b bytes.Buffer
	b.WriteString("RIFF")
	_ = binary.Write(&b, binary.LittleEndian, uint32(36+2*n))
	b.WriteString("WAVEfmt ")
	for _, v := range []any{uint32(16), uint16(1), uint16(1), uint32(16000), uint32(32000), uint16(2), uint16(16)} {
		_ = binary.Write(&b, binary.LittleEndian, v)
	}
	b.WriteString("data")
	_ = binary.Write(&b, binary.LittleEndian, uint32(2*n))
	b.Write(make([]byte, 2*n))
	return b.Bytes()
}

// form builds a multipart body from parts: each is headers and content.
func form(boundary string, parts ...[2]string) string {
	var b strings.Builder
	for _, p := range parts {
		fmt.Fprintf(&b, "--%s\r\n%s\r\n\r\n%s\r\n", boundary, p[0], p[1])
	}
	fmt.Fprintf(&b, "--%s--\r\n", boundary)
	return b.String()
}

func field(name, value string) [2]string {
	return [2]string{`Content-Disposition: form-data; name="` + name + `"`, value}
}

func file(name, content string) [2]string {
	return [2]string{`Content-Disposition: form-data; name="file"; filename="` + name + `"` + "\r\nContent-Type: audio/wav", content}
}

// multipart sends the transcription route uploads broken in the ways
// that matter: framing, missing and duplicate parts, bodies that are not
// audio, oversized files and fields.
func (hc *hostile) multipart(ctx context.Context) {
	const cat = "broken multipart uploads"
	const bd = "hostileboundary"
	ct := "Content-Type: multipart/form-data; boundary=" + bd
	good := string(wav(16000))
	model := field("model", "sim-stt")
	type upload struct {
		name, ct, body string
		allowed        []int
	}
	bad := []int{400, 413, 415, 422}
	lie := string(wav(16000))[:40] + "\xff\xff\xff\x7f" + string(make([]byte, 1000)) // a data size far past the file
	manyFields := make([][2]string, 0, 10001)
	for i := range 10000 {
		manyFields = append(manyFields, field(fmt.Sprintf("f%d", i), ""))
	}
	manyFields = append(manyFields, model, file("a.wav", good))
	uploads := []upload{
		{"control: a valid upload", ct, form(bd, model, file("a.wav", good)), []int{200}},
		{"no boundary", "Content-Type: multipart/form-data", form(bd, model, file("a.wav", good)), bad},
		{"empty boundary", "Content-Type: multipart/form-data; boundary=", form(bd, model, file("a.wav", good)), bad},
		{"boundary of 200 chars", "Content-Type: multipart/form-data; boundary=" + strings.Repeat("b", 200), form(strings.Repeat("b", 200), model, file("a.wav", good)), nil},
		{"unbalanced quote in boundary", `Content-Type: multipart/form-data; boundary="` + bd, form(bd, model, file("a.wav", good)), bad},
		{"JSON body", "Content-Type: application/json", `{"model":"sim-stt","file":"AAAA"}`, bad},
		{"no Content-Type", "X-None: 1", form(bd, model, file("a.wav", good)), bad},
		{"multipart/mixed", "Content-Type: multipart/mixed; boundary=" + bd, form(bd, model, file("a.wav", good)), bad},
		{"boundary mismatch", ct, form("otherboundary", model, file("a.wav", good)), bad},
		{"truncated: no closing delimiter", ct, strings.TrimSuffix(form(bd, model, file("a.wav", good)), "--"+bd+"--\r\n"), bad},
		{"truncated inside the file", ct, form(bd, model, file("a.wav", good))[:500], bad},
		{"no parts", ct, "--" + bd + "--\r\n", bad},
		{"empty body", ct, "", bad},
		{"no file", ct, form(bd, model), bad},
		{"no model", ct, form(bd, file("a.wav", good)), bad},
		{"empty file", ct, form(bd, model, file("a.wav", "")), bad},
		{"file not audio", ct, form(bd, model, file("a.wav", "this is not audio at all")), bad},
		{"file of NUL bytes", ct, form(bd, model, file("a.wav", string(make([]byte, 4096)))), bad},
		{"WAV header lying about its size", ct, form(bd, model, file("a.wav", lie)), nil},
		{"WAV header only", ct, form(bd, model, file("a.wav", good[:44])), nil},
		{"two files", ct, form(bd, model, file("a.wav", good), file("b.wav", good)), bad},
		{"model twice", ct, form(bd, model, field("model", "other"), file("a.wav", good)), bad},
		{"prompt of 100 KB", ct, form(bd, model, field("prompt", strings.Repeat("p", 100<<10)), file("a.wav", good)), bad},
		{"10,000 empty fields", ct, form(bd, manyFields...), nil},
		{"part headers of 20 KB", ct, form(bd, model, [2]string{`Content-Disposition: form-data; name="file"; filename="` + strings.Repeat("f", 20<<10) + `"`, good}), nil},
		{"part without headers", ct, form(bd, [2]string{"", "x"}, model, file("a.wav", good)), nil},
		{"field name invalid UTF-8", ct, form(bd, model, field("\xff\xfe", "x"), file("a.wav", good)), nil},
		{"filename with NUL and traversal", ct, form(bd, model, file("../../etc/passwd\x00.wav", good)), nil},
		{"nested multipart in the file part", ct, form(bd, model, [2]string{"Content-Disposition: form-data; name=\"file\"\r\nContent-Type: multipart/mixed; boundary=inner", form("inner", field("x", "y"))}), bad},
		{"response_format bogus", ct, form(bd, model, field("response_format", "\xff"), file("a.wav", good)), bad},
		{"beam_size 999", ct, form(bd, model, field("beam_size", "999"), file("a.wav", good)), bad},
		{"temperature not a number", ct, form(bd, model, field("temperature", "1e400"), file("a.wav", good)), bad},
		{"timestamp_granularities bogus", ct, form(bd, model, field("timestamp_granularities[]", "\x00"), file("a.wav", good)), bad},
		{"file over 25 MB", ct, form(bd, model, file("big.wav", string(wav((25<<20)/2+1000)))), entityTooLarge},
	}
	var probes []probe
	for _, path := range []string{"/v1/audio/transcriptions", "/api/v1/audio/transcriptions"} {
		for _, u := range uploads {
			probes = append(probes, probe{category: cat, label: "POST " + path + ", " + u.name,
				raw: request("POST", path, []byte(u.body), append(bearer(hc.g.Key), u.ct)...), allowed: u.allowed})
		}
		probes = append(probes,
			probe{category: cat, label: "POST " + path + ", no key",
				raw: request("POST", path, []byte(form(bd, model, file("a.wav", good))), ct), allowed: []int{401}},
			probe{category: cat, label: "POST " + path + ", Content-Length over the limit, small body",
				raw: []byte("POST " + path + " HTTP/1.1\r\nHost: hostile\r\nAuthorization: Bearer " + hc.g.Key + "\r\n" + ct +
					"\r\nContent-Length: 27262977\r\nConnection: close\r\n\r\n" + form(bd, model)), allowed: entityTooLarge})
	}
	hc.parallel(ctx, probes)
}
