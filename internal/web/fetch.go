package web

import (
	"bytes"
	"cmp"
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/svc-dev/svc/internal/netguard"
	"golang.org/x/net/html/charset"
)

// Fetch limits when a Fetcher leaves them zero.
const (
	DefaultMaxPageBytes = 2 << 20
	DefaultMaxPageChars = 12000
	DefaultFetchTimeout = 15 * time.Second
	// maxRedirects is how many redirects a fetch follows, each checked as
	// the first URL was.
	maxRedirects = 5
)

// Fetcher fetches web pages as text for web_fetch. Every address it
// connects to, redirects' included, passes Guard.
type Fetcher struct {
	Guard netguard.Guard
	// MaxBytes bounds what is read of a page; the rest is ignored.
	MaxBytes int64
	// MaxChars bounds the page's text.
	MaxChars int
	// Timeout bounds a fetch, redirects included.
	Timeout time.Duration
	// RootCAs verifies servers; nil means the system's roots.
	RootCAs *x509.CertPool
}

// Page is a fetched page.
type Page struct {
	URL   string // where it was found, after redirects
	Title string
	Text  string
}

// Fetch GETs an http or https URL and returns its text: HTML made
// readable (see HTMLText), other text as it is. Error messages are meant
// for the model that asked.
func (f *Fetcher) Fetch(ctx context.Context, rawURL string) (Page, error) {
	u, err := f.check(rawURL)
	if err != nil {
		return Page{}, err
	}
	timeout := cmp.Or(f.Timeout, DefaultFetchTimeout)
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return Page{}, fmt.Errorf("not a valid URL: %w", err)
	}
	req.Header.Set("Accept", "text/html, application/xhtml+xml, text/plain;q=0.9, */*;q=0.1")
	req.Header.Set("User-Agent", "svc-web-fetch")

	client, closeIdle := f.Guard.Client(f.RootCAs)
	defer closeIdle()
	client.CheckRedirect = func(r *http.Request, via []*http.Request) error {
		if len(via) > maxRedirects {
			return fmt.Errorf("more than %d redirects", maxRedirects)
		}
		if _, err := f.check(r.URL.String()); err != nil {
			return fmt.Errorf("the redirect to %s is refused: %w", r.URL.Redacted(), err)
		}
		return nil
	}
	resp, err := client.Do(req)
	if err != nil {
		if ge, ok := errors.AsType[*netguard.Error](err); ok {
			return Page{}, errors.New(ge.Reason)
		}
		if ctx.Err() != nil {
			return Page{}, fmt.Errorf("timed out after %s", timeout)
		}
		if ue, ok := errors.AsType[*url.Error](err); ok {
			err = ue.Err // the URL is the model's own; no need to repeat it
		}
		return Page{}, fmt.Errorf("the request failed: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode >= 300 {
		return Page{}, fmt.Errorf("the server answered %s", resp.Status)
	}
	// The guard's client asks for no compression; an encoding named anyway
	// is one nobody asked for, and its bytes are not the page's text
	// whatever Content-Type says.
	if enc := resp.Header.Get("Content-Encoding"); enc != "" && !strings.EqualFold(enc, "identity") {
		return Page{}, fmt.Errorf("the page is compressed (%s) and cannot be read", enc)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, cmp.Or(f.MaxBytes, DefaultMaxPageBytes)))
	if err != nil {
		if ctx.Err() != nil {
			return Page{}, fmt.Errorf("timed out after %s", timeout)
		}
		return Page{}, fmt.Errorf("reading the page failed: %w", err)
	}
	page := Page{URL: resp.Request.URL.String()}
	maxChars := cmp.Or(f.MaxChars, DefaultMaxPageChars)
	ctype := resp.Header.Get("Content-Type")
	switch kind := pageKind(ctype, body); kind {
	case "html":
		page.Title, page.Text = HTMLText(bytes.NewReader(utf8Text(body, ctype)), maxChars)
	case "text":
		// A NUL is in no text a model should read: a mislabelled binary.
		if bytes.IndexByte(body, 0) >= 0 {
			return Page{}, errors.New("the page is not text (binary content)")
		}
		// Cut replaces what is still not UTF-8.
		page.Text = Cut(strings.TrimSpace(string(utf8Text(body, ctype))), maxChars)
	default:
		return Page{}, fmt.Errorf("the page is not text (%s)", kind)
	}
	return page, nil
}

// check takes a URL a fetch may go to: http or https, no credentials, a
// host the guard does not refuse.
func (f *Fetcher) check(rawURL string) (*url.URL, error) {
	u, err := url.Parse(strings.TrimSpace(rawURL))
	switch {
	case err != nil:
		return nil, errors.New("not a valid URL")
	case u.Scheme != "http" && u.Scheme != "https":
		return nil, errors.New("only http and https URLs are fetched")
	case u.User != nil:
		return nil, errors.New("the URL must not contain a user name or password")
	}
	port := uint16(80)
	if u.Scheme == "https" {
		port = 443
	}
	if p := u.Port(); p != "" {
		n, err := strconv.ParseUint(p, 10, 16)
		if err != nil {
			return nil, errors.New("the URL's port is not valid")
		}
		port = uint16(n)
	}
	if why := f.Guard.CheckHost(u.Hostname(), port); why != "" {
		return nil, errors.New(why)
	}
	return u, nil
}

// pageKind is "html", "text", or the media type of something that is
// neither. Without a Content-Type the bytes decide.
// utf8Text is a page's text in UTF-8, decoded from the character set its
// Content-Type, byte order mark or <meta> names (ISO-8859-1, Shift JIS,
// ...). A page that names none is read as UTF-8 when it is valid UTF-8,
// else as Windows-1252, as browsers do; one whose <meta> names a set its
// bytes are not, but that is valid UTF-8, is taken for UTF-8.
func utf8Text(body []byte, contentType string) []byte {
	enc, name, certain := charset.DetermineEncoding(body, contentType)
	if name == "utf-8" || !certain && utf8.Valid(body) {
		return body
	}
	out, err := enc.NewDecoder().Bytes(body)
	if err != nil {
		return body
	}
	return out
}

func pageKind(contentType string, body []byte) string {
	mt, _, err := mime.ParseMediaType(contentType)
	if err != nil || mt == "" {
		mt, _, _ = mime.ParseMediaType(http.DetectContentType(body))
	}
	switch {
	case mt == "text/html" || mt == "application/xhtml+xml":
		return "html"
	case strings.HasPrefix(mt, "text/"), mt == "application/json", mt == "application/xml",
		strings.HasSuffix(mt, "+json"), strings.HasSuffix(mt, "+xml"):
		return "text"
	}
	return mt
}
