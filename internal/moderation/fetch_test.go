package moderation

import (
	"bytes"
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"
)

// publicIP stands for an image host on the internet. Nothing ever connects
// to it: the test dialer sends every connection to the local test server.
const publicIP = "93.184.216.34"

// fakeNet is the resolver and dialer seam of a Fetcher: names resolve from
// a table, and every dial is recorded, then routed to the test server.
type fakeNet struct {
	mu      sync.Mutex
	hosts   map[string][]string
	lookups []string
	dials   []string
	target  string // the test server's listener address
}

func (n *fakeNet) lookup(_ context.Context, host string) ([]net.IPAddr, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.lookups = append(n.lookups, host)
	ips, ok := n.hosts[host]
	if !ok {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	var out []net.IPAddr
	for _, s := range ips {
		ip, zone, _ := strings.Cut(s, "%")
		out = append(out, net.IPAddr{IP: net.ParseIP(ip), Zone: zone})
	}
	return out, nil
}

func (n *fakeNet) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	n.mu.Lock()
	n.dials = append(n.dials, addr)
	target := n.target
	n.mu.Unlock()
	if target == "" {
		return nil, errors.New("test: no server")
	}
	var d net.Dialer
	return d.DialContext(ctx, network, target)
}

func (n *fakeNet) dialed() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]string(nil), n.dials...)
}

// newFetchTest starts a TLS server (its certificate is valid for
// example.com) and a Fetcher that reaches it as example.com.
func newFetchTest(t *testing.T, h http.Handler) (*Fetcher, *fakeNet, *httptest.Server) {
	t.Helper()
	srv := httptest.NewUnstartedServer(h)
	// Handshakes that fail on purpose would otherwise log.
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.StartTLS()
	t.Cleanup(srv.Close)
	pool := x509.NewCertPool()
	pool.AddCert(srv.Certificate())
	n := &fakeNet{
		target: srv.Listener.Addr().String(),
		hosts: map[string][]string{
			"example.com":      {publicIP},
			"internal.test":    {"10.0.0.5"},
			"metadata.test":    {"169.254.169.254"},
			"mixed.test":       {publicIP, "127.0.0.1"},
			"v6private.test":   {"fd00::1"},
			"mapped.test":      {"::ffff:192.168.0.1"},
			"linklocal6.test":  {"fe80::1%eth0"},
			"cgnat.test":       {"100.64.0.1"},
			"unspecified.test": {"0.0.0.0"},
		},
	}
	f := &Fetcher{LookupIPAddr: n.lookup, DialContext: n.dial, RootCAs: pool, Timeout: 5 * time.Second}
	return f, n, srv
}

func serve(contentType string, body []byte) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", contentType)
		w.Write(body)
	})
}

func fetchErr(t *testing.T, err error) *FetchError {
	t.Helper()
	var fe *FetchError
	if !errors.As(err, &fe) {
		t.Fatalf("error %v (%T) is not a *FetchError", err, err)
	}
	return fe
}

func TestFetchSuccess(t *testing.T) {
	img := pngBytes(t, 3, 3)
	// The server's Content-Type is wrong on purpose: the bytes decide.
	f, n, _ := newFetchTest(t, serve("application/octet-stream", img))
	got, err := f.Fetch(context.Background(), "https://example.com/cat.png?sig=abc")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Data, img) || got.MediaType != "image/png" || got.URL != "https://example.com/cat.png?sig=abc" {
		t.Errorf("Fetch = %d bytes, %q, %q", len(got.Data), got.MediaType, got.URL)
	}
	if d := n.dialed(); len(d) != 1 || d[0] != publicIP+":443" {
		t.Errorf("dials = %v, want the checked address %s:443", d, publicIP)
	}
}

func TestFetchSizeCap(t *testing.T) {
	img := pngBytes(t, 64, 64)
	t.Run("exactly MaxBytes", func(t *testing.T) {
		f, _, _ := newFetchTest(t, serve("image/png", img))
		f.MaxBytes = int64(len(img))
		if _, err := f.Fetch(context.Background(), "https://example.com/a.png"); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("declared too large", func(t *testing.T) {
		f, _, _ := newFetchTest(t, serve("image/png", img))
		f.MaxBytes = int64(len(img)) - 1
		_, err := f.Fetch(context.Background(), "https://example.com/a.png")
		if fe := fetchErr(t, err); !fe.Refused || !strings.Contains(fe.Reason, "larger") {
			t.Errorf("err = %v", err)
		}
	})
	t.Run("streamed without a length", func(t *testing.T) {
		done := make(chan struct{})
		defer close(done)
		f, _, _ := newFetchTest(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "image/png")
			chunk := bytes.Repeat([]byte{0}, 1024)
			for {
				select {
				case <-done:
					return
				case <-r.Context().Done():
					return
				default:
				}
				if _, err := w.Write(chunk); err != nil {
					return
				}
				w.(http.Flusher).Flush()
			}
		}))
		f.MaxBytes = 4096
		_, err := f.Fetch(context.Background(), "https://example.com/endless")
		if fe := fetchErr(t, err); !fe.Refused || !strings.Contains(fe.Reason, "larger than 4096") {
			t.Errorf("err = %v", err)
		}
	})
}

func TestFetchTimeout(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	f, _, _ := newFetchTest(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	f.Timeout = 150 * time.Millisecond
	start := time.Now()
	_, err := f.Fetch(context.Background(), "https://example.com/slow.png")
	fe := fetchErr(t, err)
	if fe.Refused || !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(fe.Reason, "timed out") {
		t.Errorf("err = %v (refused %v)", err, fe.Refused)
	}
	if time.Since(start) > 3*time.Second {
		t.Errorf("took %v", time.Since(start))
	}
}

func TestFetchSlowBodyTimesOut(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	img := pngBytes(t, 8, 8)
	f, _, _ := newFetchTest(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", fmt.Sprint(len(img)))
		w.Write(img[:10])
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	f.Timeout = 150 * time.Millisecond
	_, err := f.Fetch(context.Background(), "https://example.com/slow.png")
	if fe := fetchErr(t, err); fe.Refused || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("err = %v", err)
	}
}

func TestFetchNotImage(t *testing.T) {
	f, _, _ := newFetchTest(t, serve("image/png", []byte("<html>not found</html>")))
	_, err := f.Fetch(context.Background(), "https://example.com/a.png")
	if fe := fetchErr(t, err); !fe.Refused || !errors.Is(err, errNotImage) {
		t.Errorf("err = %v", err)
	}
}

func TestFetchNon2xx(t *testing.T) {
	for _, status := range []int{http.StatusNotFound, http.StatusForbidden, http.StatusInternalServerError, http.StatusNotModified} {
		f, _, _ := newFetchTest(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(status)
			w.Write(pngBytes(t, 1, 1))
		}))
		_, err := f.Fetch(context.Background(), "https://example.com/a.png")
		if fe := fetchErr(t, err); fe.Refused || !strings.Contains(fe.Reason, fmt.Sprint(status)) {
			t.Errorf("status %d: err = %v", status, err)
		}
	}
}

func TestFetchRedirectRefused(t *testing.T) {
	var mu sync.Mutex
	var paths []string
	f, n, _ := newFetchTest(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		paths = append(paths, r.URL.Path)
		mu.Unlock()
		http.Redirect(w, r, "https://169.254.169.254/latest/meta-data/", http.StatusFound)
	}))
	_, err := f.Fetch(context.Background(), "https://example.com/a.png")
	if fe := fetchErr(t, err); !fe.Refused || !strings.Contains(fe.Reason, "redirect") {
		t.Errorf("err = %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(paths) != 1 || len(n.dialed()) != 1 {
		t.Errorf("requests %v, dials %v: the redirect was followed", paths, n.dialed())
	}
}

// Every private address form is refused before anything connects to it;
// literal forms are refused before anything is even resolved.
func TestFetchRefusesPrivateAddresses(t *testing.T) {
	tests := []struct {
		url     string
		resolve bool // a name: resolved, then refused
	}{
		{url: "https://127.0.0.1/a.png"},
		{url: "https://127.255.0.9/a.png"},
		{url: "https://10.0.0.1/a.png"},
		{url: "https://172.16.0.1/a.png"},
		{url: "https://172.31.255.254/a.png"},
		{url: "https://192.168.1.1/a.png"},
		{url: "https://169.254.169.254/latest/meta-data/"},
		{url: "https://100.64.0.1/a.png"},
		{url: "https://0.0.0.0/a.png"},
		{url: "https://224.0.0.1/a.png"},
		{url: "https://255.255.255.255/a.png"},
		{url: "https://[::1]/a.png"},
		{url: "https://[::]/a.png"},
		{url: "https://[fe80::1]/a.png"},
		{url: "https://[fe80::1%25eth0]/a.png"},
		{url: "https://[fc00::1]/a.png"},
		{url: "https://[fd12:3456::1]/a.png"},
		{url: "https://[ff02::1]/a.png"},
		{url: "https://[::ffff:127.0.0.1]/a.png"},
		{url: "https://[::ffff:10.0.0.1]/a.png"},
		{url: "https://[::ffff:a9fe:a9fe]/a.png"},
		{url: "https://[::127.0.0.1]/a.png"},
		{url: "https://[64:ff9b::127.0.0.1]/a.png"},
		{url: "https://[2002:c0a8:0101::1]/a.png"},
		{url: "https://2130706433/a.png"},
		{url: "https://0177.0.0.1/a.png"},
		{url: "https://0x7f.0.0.1/a.png"},
		{url: "https://0x7f000001/a.png"},
		{url: "https://127.1/a.png"},
		{url: "https://0/a.png"},
		{url: "https://017700000001/a.png"},
		{url: "https://1.2.3.4.5/a.png"},
		{url: "https://999.1.1.1/a.png"},
		{url: "https://localhost/a.png"},
		{url: "https://LOCALHOST./a.png"},
		{url: "https://images.localhost/a.png"},
		{url: "https://127.0.0.1:8443/a.png"},
		{url: "https://%31%32%37.0.0.1/a.png"},
		{url: "http://example.com/a.png"},
		{url: "http://2130706433/a.png"},
		{url: "ftp://example.com/a.png"},
		{url: "file:///etc/passwd"},
		{url: "gopher://127.0.0.1:6379/_FLUSHALL"},
		{url: "//example.com/a.png"},
		{url: "https://user:pw@example.com/a.png"},
		{url: "https:///a.png"},
		{url: "https://internal.test/a.png", resolve: true},
		{url: "https://metadata.test/latest/meta-data/", resolve: true},
		{url: "https://mixed.test/a.png", resolve: true},
		{url: "https://v6private.test/a.png", resolve: true},
		{url: "https://mapped.test/a.png", resolve: true},
		{url: "https://linklocal6.test/a.png", resolve: true},
		{url: "https://cgnat.test/a.png", resolve: true},
		{url: "https://unspecified.test/a.png", resolve: true},
	}
	for _, tt := range tests {
		t.Run(tt.url, func(t *testing.T) {
			f, n, _ := newFetchTest(t, serve("image/png", pngBytes(t, 1, 1)))
			_, err := f.Fetch(context.Background(), tt.url)
			if fe := fetchErr(t, err); !fe.Refused {
				t.Errorf("not refused: %v", err)
			}
			if d := n.dialed(); len(d) != 0 {
				t.Errorf("dialled %v", d)
			}
			if !tt.resolve && len(n.lookups) != 0 {
				t.Errorf("resolved %v for a literal", n.lookups)
			}
			if tt.resolve && strings.Contains(err.Error(), "10.0.0.5") {
				t.Errorf("error reveals the resolved address: %v", err)
			}
		})
	}
}

func TestFetchAllowsPublicLiterals(t *testing.T) {
	f, n, _ := newFetchTest(t, serve("image/png", pngBytes(t, 1, 1)))
	// The test certificate is not valid for these, so the TLS handshake
	// fails; what matters is that the dial was made, to the checked address.
	for _, u := range []string{"https://" + publicIP + "/a.png", "https://[2606:4700::1111]:8443/a.png", "https://[::ffff:" + publicIP + "]/a.png"} {
		_, err := f.Fetch(context.Background(), u)
		if fe := fetchErr(t, err); fe.Refused {
			t.Errorf("%s refused: %v", u, err)
		}
	}
	want := []string{publicIP + ":443", "[2606:4700::1111]:8443", "[::ffff:" + publicIP + "]:443"}
	if got := n.dialed(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("dials = %v, want %v", got, want)
	}
}

// DNS rebinding: the name is resolved once, at dial time, and the address
// dialled is the one checked; a second, inward answer is never used.
func TestFetchDialsTheCheckedAddress(t *testing.T) {
	img := pngBytes(t, 1, 1)
	f, n, _ := newFetchTest(t, serve("image/png", img))
	calls := 0
	f.LookupIPAddr = func(ctx context.Context, host string) ([]net.IPAddr, error) {
		calls++
		if calls == 1 {
			return []net.IPAddr{{IP: net.ParseIP(publicIP)}}, nil
		}
		return []net.IPAddr{{IP: net.ParseIP("127.0.0.1")}}, nil
	}
	if _, err := f.Fetch(context.Background(), "https://example.com/a.png"); err != nil {
		t.Fatal(err)
	}
	if calls != 1 || fmt.Sprint(n.dialed()) != "["+publicIP+":443]" {
		t.Errorf("lookups %d, dials %v", calls, n.dialed())
	}
	_, err := f.Fetch(context.Background(), "https://example.com/a.png")
	if fe := fetchErr(t, err); !fe.Refused || len(n.dialed()) != 1 {
		t.Errorf("second fetch: %v, dials %v", err, n.dialed())
	}
}

func TestFetchDNSFailureIsNotRefusal(t *testing.T) {
	f, n, _ := newFetchTest(t, serve("image/png", nil))
	_, err := f.Fetch(context.Background(), "https://nowhere.test/a.png")
	if fe := fetchErr(t, err); fe.Refused || len(n.dialed()) != 0 {
		t.Errorf("err = %v, dials %v", err, n.dialed())
	}
	f.LookupIPAddr = func(context.Context, string) ([]net.IPAddr, error) { return nil, nil }
	if fe := fetchErr(t, func() error { _, err := f.Fetch(context.Background(), "https://example.com/"); return err }()); fe.Refused {
		t.Errorf("no addresses: refused")
	}
}

// The production dialer checks the socket's address itself, so even an
// unchecked address handed to it never connects.
func TestFetchErrorRedactsSecrets(t *testing.T) {
	e := &FetchError{URL: "https://user:secret@example.com/a.png?X-Amz-Signature=abc#frag", Reason: "the server answered 404 Not Found"}
	s := e.Error()
	for _, secret := range []string{"secret", "abc", "frag", "user"} {
		if strings.Contains(s, secret) {
			t.Errorf("Error() = %q reveals %q", s, secret)
		}
	}
	if !strings.Contains(s, "https://example.com/a.png") || !strings.Contains(s, "404") {
		t.Errorf("Error() = %q", s)
	}
}

// What the HTTP client and the resolver say of a failure quotes the URL
// whole and names the worker's DNS server: neither reaches the message.
func TestFetchErrorKeepsItsCausesSecrets(t *testing.T) {
	raw := "https://8.8.8.8/x.png?X-Amz-Signature=SECRET123"
	for _, e := range []*FetchError{
		{URL: raw, Reason: "the request failed", Err: &url.Error{Op: "Get", URL: raw, Err: errors.New("tls: failed to verify certificate")}},
		{URL: raw, Reason: "the host name does not resolve", Err: &net.DNSError{Err: "no such host", Name: "nonexistent.invalid", Server: "10.255.255.53:53"}},
	} {
		s := e.Error()
		for _, secret := range []string{"SECRET123", "10.255.255.53", "Signature"} {
			if strings.Contains(s, secret) {
				t.Errorf("Error() = %q reveals %q", s, secret)
			}
		}
		if !strings.Contains(s, e.Reason) {
			t.Errorf("Error() = %q lacks the reason", s)
		}
	}
	tls := &FetchError{URL: raw, Reason: "the request failed", Err: &url.Error{Op: "Get", URL: raw, Err: errors.New("tls: failed to verify certificate")}}
	if !strings.Contains(tls.Error(), "tls: failed to verify certificate") {
		t.Errorf("the cause's own words are lost: %q", tls.Error())
	}
}

func TestFetcherDefaults(t *testing.T) {
	var f Fetcher
	if f.timeout() != DefaultFetchTimeout || f.maxBytes() != 20<<20 {
		t.Errorf("defaults %v %d", f.timeout(), f.maxBytes())
	}
}
