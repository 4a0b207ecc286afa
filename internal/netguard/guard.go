// Package netguard keeps fetches whose URL a request chooses (a moderation
// check's image, a model's web_fetch) off the worker's own network: the
// worker sits on someone's LAN or cloud account, and such a URL is
// attacker-chosen. Nothing at a refused address is ever connected to.
package netguard

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"syscall"
)

// Error is a refused or failed connection. Refused means the address
// itself is at fault and retrying cannot help; otherwise the network
// failed (no DNS answer, no connection).
type Error struct {
	Reason  string
	Refused bool
	Err     error
}

func (e *Error) Error() string {
	if e.Err != nil {
		return e.Reason + ": " + e.Err.Error()
	}
	return e.Reason
}

func (e *Error) Unwrap() error { return e.Err }

// Guard checks and dials addresses. The zero Guard is ready to use.
type Guard struct {
	// LookupIPAddr resolves host names; nil means
	// net.DefaultResolver.LookupIPAddr.
	LookupIPAddr func(ctx context.Context, host string) ([]net.IPAddr, error)
	// DialContext connects to an address that has already been checked
	// ("ip:port", never a name); nil means a net.Dialer that checks the
	// address once more as the socket connects. Tests set it to watch
	// every dial and to reach a local server.
	DialContext func(ctx context.Context, network, addr string) (net.Conn, error)
	// Allow exempts addresses from the check: an operator's own site on
	// the LAN, or a test's server on loopback. Only the exact address and
	// port are exempt.
	Allow []netip.AddrPort
}

// allowed reports whether the operator exempted ip:port.
func (g *Guard) allowed(ip netip.Addr, port uint16) bool {
	want := netip.AddrPortFrom(ip.Unmap().WithZone(""), port)
	return slices.ContainsFunc(g.Allow, func(a netip.AddrPort) bool {
		// An allowed address written IPv4-mapped is its IPv4 one.
		return netip.AddrPortFrom(a.Addr().Unmap(), a.Port()) == want
	})
}

// CheckHost judges a URL's host and port before anything is resolved or
// dialled: "" when it may be fetched (a name is judged again at dial
// time, by what it resolves to), else why not.
func (g *Guard) CheckHost(host string, port uint16) string {
	ip, why := HostVerdict(host)
	if why != "" && ip.IsValid() && g.allowed(ip, port) {
		return ""
	}
	return why
}

// Client is a one-fetch HTTP client that dials only checked addresses:
// fetches are rare and go to different hosts, so pooling would only keep
// sockets open. It uses no proxy, since a proxy would make the dial check
// judge the proxy instead of the URL's host, and follows no redirect: a
// redirect is the caller's to refuse, as it may point inward. rootCAs nil
// means the system's roots.
func (g *Guard) Client(rootCAs *x509.CertPool) (*http.Client, func()) {
	tr := &http.Transport{
		Proxy:                  nil,
		DialContext:            g.Dial,
		TLSClientConfig:        &tls.Config{RootCAs: rootCAs, MinVersion: tls.VersionTLS12},
		DisableKeepAlives:      true,
		DisableCompression:     true, // a gzip bomb should not get the chance
		MaxResponseHeaderBytes: 64 << 10,
	}
	return &http.Client{
		Transport: tr,
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}, tr.CloseIdleConnections
}

// Dial resolves the host itself, refuses if any address is refused, and
// dials the checked addresses one by one, so the address dialled is the
// address checked and a DNS answer that changes between check and use
// (rebinding) cannot slip through. A name with any refused address among
// its answers is refused whole rather than dialled on its public ones:
// the inward answer is there for a reason.
func (g *Guard) Dial(ctx context.Context, network, addr string) (net.Conn, error) {
	host, portStr, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, &Error{Reason: "bad address " + addr, Err: err}
	}
	p, err := strconv.ParseUint(portStr, 10, 16)
	if err != nil {
		return nil, &Error{Reason: "bad port " + portStr, Refused: true}
	}
	port := uint16(p)
	ip, why := HostVerdict(host)
	if why != "" && !(ip.IsValid() && g.allowed(ip, port)) {
		return nil, &Error{Reason: why, Refused: true}
	}
	ips := []netip.Addr{ip}
	if !ip.IsValid() {
		if ips, err = g.resolve(ctx, host, port); err != nil {
			return nil, err
		}
	}
	var errs []error
	for _, ip := range ips {
		conn, err := g.dial(ctx, network, netip.AddrPortFrom(ip, port).String())
		if err == nil {
			return conn, nil
		}
		errs = append(errs, err)
		if ctx.Err() != nil {
			break
		}
	}
	return nil, errors.Join(errs...)
}

// resolve looks a name up and checks every answer. It names the kind of
// address a name resolves to but not the address: the answer of the
// worker's DNS is not the client's business.
func (g *Guard) resolve(ctx context.Context, host string, port uint16) ([]netip.Addr, error) {
	lookup := g.LookupIPAddr
	if lookup == nil {
		lookup = net.DefaultResolver.LookupIPAddr
	}
	answers, err := lookup(ctx, host)
	if err != nil {
		return nil, &Error{Reason: "the host name does not resolve", Err: err}
	}
	if len(answers) == 0 {
		return nil, &Error{Reason: "the host name has no addresses"}
	}
	ips := make([]netip.Addr, 0, len(answers))
	for _, a := range answers {
		ip, ok := netip.AddrFromSlice(a.IP)
		if !ok {
			return nil, &Error{Reason: "the host name resolves to an invalid address"}
		}
		// The resolver gives an IPv4 address in its 16-byte form: it is
		// judged, and named, as the IPv4 address it is.
		if a.IP.To4() != nil {
			ip = ip.Unmap()
		}
		if what := RefusedAddr(ip); what != "" && !g.allowed(ip, port) {
			return nil, &Error{Reason: host + " resolves to " + what, Refused: true}
		}
		// Resolvers hand back IPv4 in 16-byte form; dial it as IPv4.
		ips = append(ips, ip.Unmap().WithZone(a.Zone))
	}
	return ips, nil
}

func (g *Guard) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	if g.DialContext != nil {
		return g.DialContext(ctx, network, addr)
	}
	d := net.Dialer{Control: g.Control}
	return d.DialContext(ctx, network, addr)
}

// Control checks the address a socket is about to connect to: a last line
// should anything above ever hand the dialer a name or an unchecked
// address.
func (g *Guard) Control(_, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return &Error{Reason: "refusing to connect to unparsed address " + address, Refused: true}
	}
	if what := RefusedAddr(ap.Addr()); what != "" && !g.allowed(ap.Addr(), ap.Port()) {
		return &Error{Reason: ap.Addr().String() + " is " + what, Refused: true}
	}
	return nil
}
