package web

import (
	"compress/gzip"
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"

	"github.com/svc-dev/svc/internal/netguard"
)

// site serves a page, plain text, an image and redirects on loopback,
// which a fetch reaches only through an allow-list entry.
func site(t *testing.T) (*httptest.Server, netip.AddrPort) {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("/page", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Write([]byte(`<html><head><title>Otters</title></head><body><nav>Home</nav><h1>Sea otters</h1><p>Otters hold hands while sleeping.</p><script>track()</script></body></html>`))
	})
	mux.HandleFunc("/notes.txt", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		w.Write([]byte("  line one\nline two  "))
	})
	mux.HandleFunc("/cat.png", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "image/png")
		w.Write([]byte("\x89PNG\r\n\x1a\n"))
	})
	mux.HandleFunc("/gzip.txt", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		w.Header().Set("Content-Encoding", "gzip")
		zw := gzip.NewWriter(w)
		zw.Write([]byte("packed text"))
		zw.Close()
	})
	mux.HandleFunc("/brotli.txt", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		w.Header().Set("Content-Encoding", "br")
		w.Write([]byte("\x1b\x0a\x00\xf8\xa5packed"))
	})
	mux.HandleFunc("/binary.txt", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		w.Write([]byte("MZ\x90\x00\x03\x00"))
	})
	mux.HandleFunc("/latin1.txt", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		w.Write([]byte("caf\xe9"))
	})
	mux.HandleFunc("/latin1.html", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=iso-8859-1")
		w.Write([]byte("<title>Caf\xe9</title><p>Caf\xe9 na\xefve</p>"))
	})
	mux.HandleFunc("/meta.html", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		w.Write([]byte("<meta charset=\"windows-1252\"><p>\x93quoted\x94</p>"))
	})
	mux.HandleFunc("/sjis.txt", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=shift_jis")
		w.Write([]byte("\x93\xfa\x96\x7b\x8c\xea"))
	})
	mux.HandleFunc("/utf8.txt", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		w.Write([]byte(strings.Repeat("ascii ", 300) + "日本語"))
	})
	mux.HandleFunc("/missing", http.NotFound)
	mux.HandleFunc("/here", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/page", http.StatusFound)
	})
	mux.HandleFunc("/inward", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, r.URL.Query().Get("to"), http.StatusFound)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv, netip.MustParseAddrPort(srv.Listener.Addr().String())
}

func TestFetchPage(t *testing.T) {
	srv, addr := site(t)
	f := &Fetcher{Guard: netguard.Guard{Allow: []netip.AddrPort{addr}}}
	page, err := f.Fetch(context.Background(), srv.URL+"/page")
	if err != nil {
		t.Fatal(err)
	}
	if page.Title != "Otters" || page.Text != "# Sea otters\n\nOtters hold hands while sleeping." || page.URL != srv.URL+"/page" {
		t.Errorf("Fetch = %+v", page)
	}
	page, err = f.Fetch(context.Background(), srv.URL+"/here")
	if err != nil || page.URL != srv.URL+"/page" || page.Title != "Otters" {
		t.Errorf("Fetch through a redirect = %+v, %v", page, err)
	}
	page, err = f.Fetch(context.Background(), srv.URL+"/notes.txt")
	if err != nil || page.Text != "line one\nline two" {
		t.Errorf("Fetch of text = %+v, %v", page, err)
	}
	// Text in the character set the page names, or, naming none and not
	// UTF-8, in Windows-1252 as browsers read it.
	for _, tc := range []struct{ path, title, text string }{
		{"/latin1.txt", "", "café"},
		{"/latin1.html", "Café", "Café naïve"},
		{"/meta.html", "", "\u201cquoted\u201d"},
		{"/sjis.txt", "", "日本語"},
		{"/utf8.txt", "", strings.Repeat("ascii ", 300) + "日本語"},
	} {
		page, err = f.Fetch(context.Background(), srv.URL+tc.path)
		if err != nil || page.Title != tc.title || strings.TrimSpace(page.Text) != strings.TrimSpace(tc.text) {
			t.Errorf("Fetch of %s = %+v, %v; want %q", tc.path, page, err, tc.text)
		}
	}
	f.MaxChars = 10
	if page, _ := f.Fetch(context.Background(), srv.URL+"/page"); page.Text != "# Sea ott…" {
		t.Errorf("Fetch cut to 10 characters = %q", page.Text)
	}
}

func TestFetchFailures(t *testing.T) {
	srv, addr := site(t)
	f := &Fetcher{Guard: netguard.Guard{Allow: []netip.AddrPort{addr}}}
	for _, c := range []struct{ url, want string }{
		{srv.URL + "/cat.png", "not text (image/png)"},
		{srv.URL + "/brotli.txt", "compressed (br)"},
		{srv.URL + "/gzip.txt", "compressed (gzip)"}, // asked for none
		{srv.URL + "/binary.txt", "not text (binary content)"},
		{srv.URL + "/missing", "404"},
		{"ftp://example.com/x", "only http and https"},
		{"http://user:pw@example.com/", "user name or password"},
		{"::not a url", "not a valid URL"},
	} {
		_, err := f.Fetch(context.Background(), c.url)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Fetch(%s) = %v, want an error with %q", c.url, err, c.want)
		}
	}
}

// Inward addresses are refused before anything is dialled, whether
// written as literals, resolved from names, or redirected to.
func TestFetchRefusesInwardAddresses(t *testing.T) {
	srv, addr := site(t)
	var dials []string
	f := &Fetcher{Guard: netguard.Guard{
		Allow: []netip.AddrPort{addr},
		LookupIPAddr: func(_ context.Context, host string) ([]net.IPAddr, error) {
			return []net.IPAddr{{IP: net.ParseIP(map[string]string{"internal.test": "10.1.2.3", "metadata.test": "169.254.169.254"}[host])}}, nil
		},
		DialContext: func(ctx context.Context, network, a string) (net.Conn, error) {
			dials = append(dials, a)
			var d net.Dialer
			return d.DialContext(ctx, network, a)
		},
	}}
	other := "http://127.0.0.1:" + "1" // loopback on a port nobody allowed
	for _, c := range []struct{ url, want string }{
		{"http://127.0.0.1/", "loopback"},
		{other + "/", "loopback"},
		{"http://localhost:" + srv.URL[strings.LastIndexByte(srv.URL, ':')+1:] + "/page", "loopback name"},
		{"http://10.0.0.1/", "private"},
		{"http://169.254.169.254/latest/meta-data/", "link-local"},
		{"http://[::1]/", "loopback"},
		{"http://2130706433/", "non-standard"},
		{"http://internal.test/", "private"},
		{"http://metadata.test/", "link-local"},
		{srv.URL + "/inward?to=http://127.0.0.1:1/", "redirect"},
		{srv.URL + "/inward?to=http://10.0.0.1/", "redirect"},
		{srv.URL + "/inward?to=http://169.254.169.254/", "redirect"},
		{srv.URL + "/inward?to=http://internal.test/", "private"},
	} {
		dials = nil
		_, err := f.Fetch(context.Background(), c.url)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Fetch(%s) = %v, want a refusal with %q", c.url, err, c.want)
		}
		for _, d := range dials {
			if d != addr.String() {
				t.Errorf("Fetch(%s) dialled %s", c.url, d)
			}
		}
	}
}
