package openai

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/svc-dev/svc/internal/sock"
	"github.com/valyala/fasthttp"
)

// client is the adapter's HTTP/1.1 client for one engine. Requests are
// written and answers read with fasthttp's codec, over kept-alive
// connections of the client's own.
//
// net/http's client ran a reader and a writer goroutine per connection
// and cloned and parsed headers for every request: most of what a relayed
// request cost the worker. fasthttp's clients take no context, yet a
// cancelled request must close its connection at once, since that is how
// an engine learns to stop generating; so each exchange holds its
// connection itself and closes it when the context ends.
type client struct {
	dial   func(ctx context.Context) (net.Conn, error)
	host   string // the Host header
	prefix string // the base URL's path, ahead of each request's
	auth   string // the Authorization header; "" for none
	// proxyAuth is the Proxy-Authorization header of a request sent to
	// a proxy (prefix then starts with the server's URL).
	proxyAuth string

	mu     sync.Mutex
	idle   []*conn     // kept alive, the longest idle first
	sweep  *time.Timer // closes connections idle past idleTimeout; nil when none are
	closed bool
}

// Connection settings: those the worker's net/http client had. A busy
// worker runs hundreds of concurrent streams against one local server,
// and reconnecting for each would waste time and ports.
const (
	maxIdle          = 256
	idleTimeout      = 90 * time.Second
	dialTimeout      = 30 * time.Second
	handshakeTimeout = 10 * time.Second
	tcpKeepAlive     = 30 * time.Second
	// readBuffer bounds a response's header block as well (fasthttp
	// parses it in place).
	readBuffer  = 16 << 10
	writeBuffer = 4 << 10
)

// DialFunc connects to an engine's address (host:port), as
// net.Dialer.DialContext does.
type DialFunc func(ctx context.Context, network, addr string) (net.Conn, error)

// ProxyFunc names the proxy to reach a URL through, nil for none; the
// default is the environment's (HTTP_PROXY, HTTPS_PROXY and NO_PROXY),
// as net/http's client had it.
type ProxyFunc func(*url.URL) (*url.URL, error)

func proxyFromEnvironment(u *url.URL) (*url.URL, error) {
	return http.ProxyFromEnvironment(&http.Request{URL: u})
}

// newClient returns a client of the server at base, a URL that
// normaliseBase accepted. Connections are opened with dial when it is
// set, through the proxy that proxy names.
func newClient(base, apiKey string, dial DialFunc, proxy ProxyFunc) (*client, error) {
	u, err := url.Parse(base)
	if err != nil {
		return nil, fmt.Errorf("parse base URL: %w", err)
	}
	c := &client{host: u.Host, prefix: u.EscapedPath()}
	switch {
	case apiKey != "":
		c.auth = "Bearer " + apiKey
	case u.User != nil:
		// As net/http does with a URL's user information.
		c.auth = basicAuth(u.User)
	}
	if dial == nil {
		dial = sock.Dial(&net.Dialer{Timeout: dialTimeout, KeepAlive: tcpKeepAlive})
	}
	addr := hostPort(u)
	c.dial = func(ctx context.Context) (net.Conn, error) { return dial(ctx, "tcp", addr) }
	if proxy == nil {
		proxy = proxyFromEnvironment
	}
	p, err := proxy(u)
	if err != nil {
		return nil, fmt.Errorf("proxy: %w", err)
	}
	if p != nil {
		if p.Scheme != "http" {
			return nil, fmt.Errorf("proxy %s: only http:// proxies are supported", p.Redacted())
		}
		proxyAddr, auth := hostPort(p), ""
		if p.User != nil {
			auth = basicAuth(p.User)
		}
		if u.Scheme == "https" {
			c.dial = func(ctx context.Context) (net.Conn, error) {
				nc, err := dial(ctx, "tcp", proxyAddr)
				if err != nil {
					return nil, err
				}
				if err := connect(ctx, nc, addr, auth); err != nil {
					nc.Close()
					return nil, err
				}
				return nc, nil
			}
		} else {
			// A plain request goes to the proxy with the whole URL.
			c.dial = func(ctx context.Context) (net.Conn, error) { return dial(ctx, "tcp", proxyAddr) }
			c.prefix = "http://" + u.Host + c.prefix
			c.proxyAuth = auth
		}
	}
	if u.Scheme == "https" {
		cfg := &tls.Config{ServerName: u.Hostname(), NextProtos: []string{"http/1.1"}}
		plain := c.dial
		c.dial = func(ctx context.Context) (net.Conn, error) {
			nc, err := plain(ctx)
			if err != nil {
				return nil, err
			}
			hctx, cancel := context.WithTimeout(ctx, handshakeTimeout)
			defer cancel()
			tc := tls.Client(nc, cfg)
			if err := tc.HandshakeContext(hctx); err != nil {
				nc.Close()
				return nil, err
			}
			return tc, nil
		}
	}
	return c, nil
}

// hostPort is u's host and port, the scheme's port when it has none.
func hostPort(u *url.URL) string {
	port := u.Port()
	if port == "" {
		port = "80"
		if u.Scheme == "https" {
			port = "443"
		}
	}
	return net.JoinHostPort(u.Hostname(), port)
}

func basicAuth(user *url.Userinfo) string {
	pass, _ := user.Password()
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(user.Username()+":"+pass))
}

// connect asks the proxy at the other end of nc for a tunnel to addr.
// This happens once per connection, so net/http reads the answer.
func connect(ctx context.Context, nc net.Conn, addr, auth string) error {
	hctx, cancel := context.WithTimeout(ctx, handshakeTimeout)
	defer cancel()
	stop := context.AfterFunc(hctx, func() { nc.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	req := "CONNECT " + addr + " HTTP/1.1\r\nHost: " + addr + "\r\n"
	if auth != "" {
		req += "Proxy-Authorization: " + auth + "\r\n"
	}
	if _, err := io.WriteString(nc, req+"\r\n"); err != nil {
		return fmt.Errorf("proxy CONNECT: %w", err)
	}
	// The proxy sends nothing after its answer until the TLS handshake
	// begins, so nothing is lost in the reader's buffer.
	resp, err := http.ReadResponse(bufio.NewReader(nc), &http.Request{Method: http.MethodConnect})
	if err != nil {
		return fmt.Errorf("proxy CONNECT: %w", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("proxy CONNECT: %s", resp.Status)
	}
	if !stop() {
		return fmt.Errorf("proxy CONNECT: %w", hctx.Err())
	}
	return nc.SetDeadline(time.Time{})
}

// conn is one connection to the engine.
type conn struct {
	nc        net.Conn
	br        *bufio.Reader
	bw        *bufio.Writer
	idleSince time.Time
	// head is where the head of each request with a body in hand is
	// written (see appendHead), kept for the next.
	head []byte
}

// get returns a kept-alive connection, or a new one when there is none or
// fresh is set; reused says which.
func (c *client) get(ctx context.Context, fresh bool) (cn *conn, reused bool, err error) {
	if !fresh {
		c.mu.Lock()
		if n := len(c.idle); n > 0 {
			// The most recently used: the least likely to have been closed
			// by the server's own idle timeout.
			cn = c.idle[n-1]
			c.idle[n-1] = nil
			c.idle = c.idle[:n-1]
		}
		c.mu.Unlock()
		if cn != nil {
			return cn, true, nil
		}
	}
	nc, err := c.dial(ctx)
	if err != nil {
		return nil, false, err
	}
	return &conn{nc: nc, br: bufio.NewReaderSize(nc, readBuffer), bw: bufio.NewWriterSize(nc, writeBuffer)}, false, nil
}

// put keeps cn for a later request, if there is room.
func (c *client) put(cn *conn) {
	c.mu.Lock()
	if c.closed || len(c.idle) >= maxIdle {
		c.mu.Unlock()
		cn.nc.Close()
		return
	}
	cn.idleSince = time.Now()
	c.idle = append(c.idle, cn)
	if c.sweep == nil {
		c.sweep = time.AfterFunc(idleTimeout, c.closeStale)
	}
	c.mu.Unlock()
}

// closeStale closes the connections idle for idleTimeout, and sets itself
// to run again when the next one will have been.
func (c *client) closeStale() {
	c.mu.Lock()
	now := time.Now()
	n := 0
	for n < len(c.idle) && now.Sub(c.idle[n].idleSince) >= idleTimeout {
		n++
	}
	stale := make([]*conn, n)
	copy(stale, c.idle)
	m := copy(c.idle, c.idle[n:])
	clear(c.idle[m:])
	c.idle = c.idle[:m]
	if m > 0 && !c.closed {
		c.sweep.Reset(idleTimeout - now.Sub(c.idle[0].idleSince))
	} else {
		c.sweep = nil
	}
	c.mu.Unlock()
	for _, cn := range stale {
		cn.nc.Close()
	}
}

// close closes the idle connections; those in use are closed when their
// exchanges end.
func (c *client) close() {
	c.mu.Lock()
	c.closed = true
	if c.sweep != nil {
		c.sweep.Stop()
		c.sweep = nil
	}
	idle := c.idle
	c.idle = nil
	c.mu.Unlock()
	for _, cn := range idle {
		cn.nc.Close()
	}
}

// request is one request to the engine.
type request struct {
	method string
	path   string // under the base URL
	// body is sent with its length. It may be sent twice: once on a kept-
	// alive connection the engine had closed, then on a new one.
	body []byte
	// stream, when set, is the body instead, read while it is sent, of
	// size bytes (-1 when unknown: it is sent chunked). It always goes on
	// a new connection, so that it is sent once.
	stream      io.Reader
	size        int64
	contentType string
	accept      string
}

// errNoAnswer is a connection that closed before an answer began.
var errNoAnswer = errors.New("the connection closed before an answer")

// do sends r and reads the head of the answer; the caller reads the body
// from the response and closes it. The context bounds the whole exchange,
// the body included: when it ends, the connection is closed.
func (c *client) do(ctx context.Context, r *request) (*response, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	resp, retry, err := c.try(ctx, r, r.stream != nil)
	if retry {
		// A kept-alive connection the engine closed while it was idle.
		resp, _, err = c.try(ctx, r, true)
	}
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", r.method, r.path, err)
	}
	return resp, nil
}

// try is one attempt at do. retry is set when it failed on a reused
// connection before any answer, and r can be sent again.
func (c *client) try(ctx context.Context, r *request, fresh bool) (_ *response, retry bool, _ error) {
	cn, reused, err := c.get(ctx, fresh)
	if err != nil {
		return nil, false, err
	}
	resp := &response{c: c, cn: cn}
	nc := cn.nc
	resp.stop = context.AfterFunc(ctx, func() { nc.Close() })
	var writeErr error
	if r.stream == nil {
		cn.head = c.appendHead(cn.head[:0], r)
		writeErr = writeWhole(cn.bw, cn.head, r.body)
		// On a failed write the answer is read all the same: an engine
		// may refuse a request before reading it whole, then close.
	} else {
		req := fasthttp.AcquireRequest()
		c.fill(req, r)
		resp.req, resp.wrote = req, make(chan error, 1)
		src := &sourceReader{r: r.stream, left: r.size}
		req.SetBodyStream(src, int(r.size))
		// The body is written while the answer is read, as the engine may
		// answer before it has read it all. resp.finish waits for this.
		go func() {
			err := writeRequest(req, cn.bw)
			if src.err != nil {
				// The upload broke: the engine would wait for the rest.
				nc.Close()
			}
			resp.wrote <- err
		}()
	}
	fr := fasthttp.AcquireResponse()
	fr.StreamBody = true
	fr.Header.SetNoDefaultContentType(true)
	resp.fr = fr
	if err := fr.Read(cn.br); err != nil {
		if werr := resp.finish(false); werr != nil {
			writeErr = werr
		}
		if errors.Is(err, io.EOF) {
			retry = reused && r.stream == nil
			err = errNoAnswer
		}
		if writeErr != nil {
			err = writeErr
		}
		return nil, retry && ctx.Err() == nil, err
	}
	resp.status = fr.StatusCode()
	resp.body = fr.BodyStream()
	resp.eof = resp.body == nil // no body to read: a 204, a 304
	return resp, false, nil
}

// fill sets req from r.
func (c *client) fill(req *fasthttp.Request, r *request) {
	h := &req.Header
	h.SetMethod(r.method)
	var uri [256]byte
	h.SetRequestURIBytes(append(append(uri[:0], c.prefix...), r.path...))
	h.SetHost(c.host)
	if r.contentType != "" {
		h.SetContentType(r.contentType)
	}
	if r.accept != "" {
		h.Set("Accept", r.accept)
	}
	if c.auth != "" {
		h.Set("Authorization", c.auth)
	}
	if c.proxyAuth != "" {
		h.Set("Proxy-Authorization", c.proxyAuth)
	}
	if r.stream == nil && r.body != nil {
		req.SetBodyRaw(r.body)
	}
}

// appendHead writes the request line and headers of r, whose body is in
// hand, as fasthttp's Request.Write does (TestAppendHeadAsFasthttp): every
// request to the engine is one, and building a fasthttp.Request for it,
// header by header, cost more than writing it.
func (c *client) appendHead(b []byte, r *request) []byte {
	b = append(b, r.method...)
	b = append(b, ' ')
	b = append(b, c.prefix...)
	b = append(b, r.path...)
	b = append(b, " HTTP/1.1\r\nHost: "...)
	b = append(b, c.host...)
	b = append(b, "\r\n"...)
	switch {
	case r.contentType != "":
		b = appendHeader(b, "Content-Type", r.contentType)
	case len(r.body) > 0:
		b = appendHeader(b, "Content-Type", "application/octet-stream")
	}
	if len(r.body) > 0 || r.method != fasthttp.MethodGet && r.method != fasthttp.MethodHead {
		b = append(b, "Content-Length: "...)
		b = strconv.AppendInt(b, int64(len(r.body)), 10)
		b = append(b, "\r\n"...)
	}
	b = appendHeader(b, "Accept", r.accept)
	b = appendHeader(b, "Authorization", c.auth)
	b = appendHeader(b, "Proxy-Authorization", c.proxyAuth)
	return append(b, "\r\n"...)
}

// appendHeader writes the header line name: value, none when value is
// empty.
func appendHeader(b []byte, name, value string) []byte {
	if value == "" {
		return b
	}
	b = append(b, name...)
	b = append(b, ": "...)
	b = append(b, value...)
	return append(b, "\r\n"...)
}

// writeWhole sends a request's head and body.
func writeWhole(bw *bufio.Writer, head, body []byte) error {
	_, _ = bw.Write(head)
	_, _ = bw.Write(body)
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("write request: %w", err)
	}
	return nil
}

func writeRequest(req *fasthttp.Request, bw *bufio.Writer) error {
	if err := req.Write(bw); err != nil {
		return fmt.Errorf("write request: %w", err)
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("write request: %w", err)
	}
	return nil
}

// sourceReader is a streamed body: it ends at the length the request
// declared, fails if the source ends before it, and remembers the first
// error reading the source, to tell a broken upload from a broken
// connection.
type sourceReader struct {
	r    io.Reader
	left int64 // bytes still to send; -1 when the length is unknown
	err  error
}

func (s *sourceReader) Read(p []byte) (int, error) {
	if s.left == 0 {
		return 0, io.EOF
	}
	if s.left > 0 && int64(len(p)) > s.left {
		p = p[:s.left]
	}
	n, err := s.r.Read(p)
	if s.left > 0 {
		s.left -= int64(n)
		if err == io.EOF && s.left > 0 {
			err = fmt.Errorf("the body ended %d bytes short of its length: %w", s.left, io.ErrUnexpectedEOF)
		}
	}
	if err != nil && err != io.EOF && s.err == nil {
		s.err = err
	}
	return n, err
}

// response is an answer whose head has been read. Its body is read with
// Read; Close must be called once, after which the connection goes back
// to the pool if the exchange ended cleanly.
type response struct {
	c      *client
	cn     *conn
	fr     *fasthttp.Response
	status int
	body   io.Reader   // nil when the answer has none
	stop   func() bool // ends the context's watch on the connection
	// req and wrote are a streamed request and its writer's result,
	// delivered once; nil when the request was written before the answer
	// was read.
	req   *fasthttp.Request
	wrote chan error
	eof   bool // the body was read to its end
}

func (r *response) Read(p []byte) (int, error) {
	if r.body == nil {
		r.eof = true
		return 0, io.EOF
	}
	n, err := r.body.Read(p)
	if err == io.EOF {
		r.eof = true
	}
	return n, err
}

// length is the body's length from the Content-Length header; negative
// when there is none.
func (r *response) length() int { return r.fr.Header.ContentLength() }

// contentType is the Content-Type header, "" when there is none.
func (r *response) contentType() []byte { return r.fr.Header.ContentType() }

// Close ends the exchange.
func (r *response) Close() error {
	r.finish(r.eof && !r.fr.ConnectionClose())
	return nil
}

// finish ends the exchange, keeping the connection if reuse is set and
// nothing else stands in the way. It returns the error writing a streamed
// request, if any.
func (r *response) finish(reuse bool) (writeErr error) {
	// stop is false once the context's end has closed the connection.
	reuse = r.stop() && reuse
	done := r.wrote == nil
	if !done {
		select {
		case writeErr = <-r.wrote:
			done = true
		default:
			// Still writing: what the engine reads next would be the rest
			// of this body.
		}
	}
	reuse = reuse && done && writeErr == nil
	if !reuse {
		r.cn.nc.Close()
	}
	if !done {
		// The closed connection ends the write, or the source's end does.
		writeErr = <-r.wrote
	}
	if r.req != nil {
		fasthttp.ReleaseRequest(r.req)
	}
	fasthttp.ReleaseResponse(r.fr)
	r.fr, r.req, r.body, r.wrote = nil, nil, nil, nil
	if reuse {
		r.c.put(r.cn)
	}
	return writeErr
}
