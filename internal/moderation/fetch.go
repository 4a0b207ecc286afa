package moderation

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/netguard"
)

// DefaultFetchTimeout bounds one image fetch, connection to last byte.
const DefaultFetchTimeout = 10 * time.Second

// Fetcher fetches https image URLs for guard-c without letting a URL reach
// the worker's own network: the worker sits on someone's LAN or cloud
// account, and an image URL is attacker-chosen. The zero Fetcher is ready
// to use.
type Fetcher struct {
	// MaxBytes bounds an image; 0 means api.ModerationMaxImageBytes.
	MaxBytes int64
	// Timeout bounds a fetch; 0 means DefaultFetchTimeout.
	Timeout time.Duration

	// LookupIPAddr resolves host names; nil means
	// net.DefaultResolver.LookupIPAddr.
	LookupIPAddr func(ctx context.Context, host string) ([]net.IPAddr, error)
	// DialContext connects to an address that has already been checked
	// ("ip:port", never a name); nil means a net.Dialer that checks the
	// address once more as the socket connects. Tests set it to watch
	// every dial and to reach a local server.
	DialContext func(ctx context.Context, network, addr string) (net.Conn, error)
	// RootCAs verifies servers; nil means the system's roots.
	RootCAs *x509.CertPool
}

// FetchError is a failed fetch. Refused means the URL itself is at fault
// and retrying cannot help (answer 400): a refused scheme or address, a
// redirect, an oversized or non-image body. Otherwise the fetch failed
// (answer 502): no DNS answer, no connection, a timeout, a non-2xx status.
type FetchError struct {
	URL     string
	Reason  string
	Refused bool
	Err     error
}

func (e *FetchError) Error() string {
	s := "fetch image " + redactURL(e.URL) + ": " + e.Reason
	if d := fetchDetail(e.Err); d != "" {
		s += ": " + d
	}
	return s
}

// fetchDetail is what a fetch's error adds to its reason that the client
// may read (the message reaches it and the usage log): not the URL again,
// which the HTTP client's errors quote whole, query and its signature
// included, nor a DNS error, which names the worker's resolver.
func fetchDetail(err error) string {
	if err == nil {
		return ""
	}
	var dns *net.DNSError
	if errors.As(err, &dns) {
		return ""
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	return err.Error()
}

func (e *FetchError) Unwrap() error { return e.Err }

// redactURL drops the query, fragment and credentials of a URL for error
// messages, which end up in logs: signed image URLs carry their secret in
// the query.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		if len(raw) > 64 {
			raw = raw[:64] + "…"
		}
		return strconv.Quote(raw)
	}
	u.User, u.RawQuery, u.ForceQuery, u.Fragment, u.RawFragment = nil, "", false, "", ""
	return u.String()
}

// Fetch GETs an https image URL and returns its bytes and the media type
// read from them. Nothing at a refused address is ever connected to (see
// netguard). Redirects are not followed; the body is read to MaxBytes and
// a byte more.
func (f *Fetcher) Fetch(ctx context.Context, rawURL string) (api.ModerationImage, error) {
	refuse := func(reason string, err error) (api.ModerationImage, error) {
		return api.ModerationImage{}, &FetchError{URL: rawURL, Reason: reason, Refused: true, Err: err}
	}
	fail := func(reason string, err error) (api.ModerationImage, error) {
		return api.ModerationImage{}, &FetchError{URL: rawURL, Reason: reason, Err: err}
	}
	u, err := url.Parse(rawURL)
	switch {
	case err != nil:
		return refuse("not a valid URL", nil)
	case u.Scheme != "https":
		return refuse("only https image URLs are fetched", nil)
	case u.User != nil:
		return refuse("the URL must not contain a user name or password", nil)
	}
	g := f.guard()
	if why := g.CheckHost(u.Hostname(), 443); why != "" {
		return refuse(why, nil)
	}

	ctx, cancel := context.WithTimeout(ctx, f.timeout())
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return refuse("not a valid URL", err)
	}
	req.Header.Set("Accept", "image/png, image/jpeg, image/gif, image/webp")
	// Moderation's and chat's image fetches alike.
	req.Header.Set("User-Agent", "svc-worker")

	client, closeIdle := g.Client(f.RootCAs)
	defer closeIdle()
	resp, err := client.Do(req)
	if err == nil && ctx.Err() != nil {
		// The transport may still hand over a response that raced the
		// deadline (the server answering the cancellation itself); it is
		// not the image.
		resp.Body.Close()
		err = ctx.Err()
	}
	if err != nil {
		var ge *netguard.Error
		switch {
		case errors.As(err, &ge):
			return api.ModerationImage{}, &FetchError{URL: rawURL, Reason: ge.Reason, Refused: ge.Refused, Err: ge.Err}
		case errors.Is(err, context.DeadlineExceeded) && ctx.Err() != nil:
			return fail("timed out after "+f.timeout().String(), err)
		}
		return fail("the request failed", err)
	}
	defer resp.Body.Close()

	limit := f.maxBytes()
	switch {
	case resp.StatusCode >= 300 && resp.StatusCode < 400 && resp.Header.Get("Location") != "":
		return refuse(fmt.Sprintf("the server redirects (%s); redirects are not followed, send the image's own URL", resp.Status), nil)
	case resp.StatusCode < 200 || resp.StatusCode >= 300:
		return fail("the server answered "+resp.Status, nil)
	case resp.ContentLength > limit:
		return refuse(fmt.Sprintf("the image is larger than %d bytes", limit), nil)
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return fail("timed out after "+f.timeout().String(), err)
		}
		return fail("reading the image failed", err)
	}
	if int64(len(data)) > limit {
		return refuse(fmt.Sprintf("the image is larger than %d bytes", limit), nil)
	}
	// The server's Content-Type is not trusted: the bytes decide.
	mt, err := inspectImage(data)
	if err != nil {
		return refuse("the URL does not hold an image", err)
	}
	return api.ModerationImage{Data: data, MediaType: mt, URL: rawURL}, nil
}

func (f *Fetcher) timeout() time.Duration {
	if f.Timeout > 0 {
		return f.Timeout
	}
	return DefaultFetchTimeout
}

func (f *Fetcher) maxBytes() int64 {
	if f.MaxBytes > 0 {
		return f.MaxBytes
	}
	return api.ModerationMaxImageBytes
}

// guard is the address check the fetch dials through.
func (f *Fetcher) guard() *netguard.Guard {
	return &netguard.Guard{LookupIPAddr: f.LookupIPAddr, DialContext: f.DialContext}
}
