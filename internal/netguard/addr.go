package netguard

import (
	"net/netip"
	"strconv"
	"strings"
)

// addrRange is a block of addresses a fetch must not reach, and how
// to say so.
type addrRange struct {
	prefix netip.Prefix
	what   string
	// embedded: the range carries an IPv4 address that decides instead
	// (NAT64 and 6to4 reach the IPv4 address they embed).
	embedded func(netip.Addr) netip.Addr
}

// refusedRanges lists what is not the public internet: loopback, private,
// link-local (cloud metadata lives at 169.254.169.254), carrier-grade NAT,
// unspecified, multicast, reserved and documentation blocks, and the IPv6
// forms that reach IPv4 ones. Built on each call: it is small, and a table
// nobody can write is one nobody can corrupt. Order matters where blocks
// nest (::1 before ::/96).
func refusedRanges() []addrRange {
	p := netip.MustParsePrefix
	nat64 := func(a netip.Addr) netip.Addr {
		b := a.As16()
		return netip.AddrFrom4([4]byte(b[12:16]))
	}
	sixToFour := func(a netip.Addr) netip.Addr {
		b := a.As16()
		return netip.AddrFrom4([4]byte(b[2:6]))
	}
	return []addrRange{
		{prefix: p("0.0.0.0/8"), what: "an unspecified (this-network) address"},
		{prefix: p("10.0.0.0/8"), what: "a private address"},
		{prefix: p("100.64.0.0/10"), what: "a carrier-grade NAT address"},
		{prefix: p("127.0.0.0/8"), what: "a loopback address"},
		{prefix: p("169.254.0.0/16"), what: "a link-local address"},
		{prefix: p("172.16.0.0/12"), what: "a private address"},
		{prefix: p("192.0.0.0/24"), what: "an IETF protocol address"},
		{prefix: p("192.0.2.0/24"), what: "a documentation address"},
		{prefix: p("192.88.99.0/24"), what: "a 6to4 relay address"},
		{prefix: p("192.168.0.0/16"), what: "a private address"},
		{prefix: p("198.18.0.0/15"), what: "a benchmarking address"},
		{prefix: p("198.51.100.0/24"), what: "a documentation address"},
		{prefix: p("203.0.113.0/24"), what: "a documentation address"},
		{prefix: p("224.0.0.0/4"), what: "a multicast address"},
		{prefix: p("240.0.0.0/4"), what: "a reserved or broadcast address"},

		{prefix: p("::/128"), what: "an unspecified address"},
		{prefix: p("::1/128"), what: "a loopback address"},
		{prefix: p("::/96"), what: "an IPv4-compatible IPv6 address"},
		// SIIT translators (RFC 6145) carry IPv4 in ::ffff:0:0:0/96;
		// none of it is a host to fetch from.
		{prefix: p("::ffff:0:0:0/96"), what: "an IPv4-translated IPv6 address"},
		{prefix: p("64:ff9b::/96"), what: "a NAT64 address", embedded: nat64},
		{prefix: p("64:ff9b:1::/48"), what: "a local NAT64 address"},
		{prefix: p("100::/64"), what: "a discard address"},
		{prefix: p("2001::/32"), what: "a Teredo address"},
		{prefix: p("2001:db8::/32"), what: "a documentation address"},
		{prefix: p("2002::/16"), what: "a 6to4 address", embedded: sixToFour},
		{prefix: p("fc00::/7"), what: "a unique local (private) address"},
		{prefix: p("fe80::/10"), what: "a link-local address"},
		{prefix: p("fec0::/10"), what: "a site-local address"},
		{prefix: p("ff00::/8"), what: "a multicast address"},
	}
}

// RefusedAddr says what ip is when a fetch must not connect to it,
// and "" when it may. IPv4-mapped IPv6 (::ffff:127.0.0.1) is judged as the
// IPv4 address it reaches.
func RefusedAddr(ip netip.Addr) string {
	ip = ip.WithZone("")
	if ip.Is4In6() {
		if what := RefusedAddr(ip.Unmap()); what != "" {
			return what + " (IPv4-mapped)"
		}
		return ""
	}
	for _, r := range refusedRanges() {
		if !r.prefix.Contains(ip) {
			continue
		}
		if r.embedded == nil {
			return r.what
		}
		if what := RefusedAddr(r.embedded(ip)); what != "" {
			return what + " (through " + r.what + ")"
		}
		return ""
	}
	return ""
}

// HostVerdict classifies the host of a URL before anything is
// resolved or dialled: an IP literal (ip valid), a name to resolve (ip
// invalid, refused ""), or refused with the reason.
func HostVerdict(host string) (ip netip.Addr, refused string) {
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	if host == "" {
		return netip.Addr{}, "the URL has no host"
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		if what := RefusedAddr(ip); what != "" {
			return ip, host + " is " + what
		}
		return ip, ""
	}
	if numericHost(host) {
		// 2130706433, 0177.0.0.1, 0x7f.1, 127.1: resolvers disagree on
		// what these mean (glibc reads them as IPv4, Go's resolver asks
		// DNS), so no check could be sure where a dial would go. No
		// real host needs them.
		if ip, ok := parseLegacyIPv4(host); ok {
			why := host + " is " + ip.String() + " in a non-standard form"
			if what := RefusedAddr(ip); what != "" {
				why += ", " + what
			}
			return netip.Addr{}, why
		}
		return netip.Addr{}, host + " is neither a host name nor a valid IP address"
	}
	if host == "localhost" || strings.HasSuffix(host, ".localhost") {
		return netip.Addr{}, host + " is a loopback name"
	}
	return netip.Addr{}, ""
}

// LoopbackHost reports whether a URL's host names this machine by a
// loopback name or address: localhost, a name under .localhost, 127.0.0.0/8
// or ::1 (IPv4-mapped too).
func LoopbackHost(host string) bool {
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	if host == "localhost" || strings.HasSuffix(host, ".localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.Unmap().IsLoopback()
}

// numericHost reports whether a host's last label is a number (decimal,
// or hex with 0x), which makes the whole host an IPv4 address to URL
// parsers and resolvers; no top-level domain is numeric.
func numericHost(host string) bool {
	last := host[strings.LastIndexByte(host, '.')+1:]
	if hex, ok := strings.CutPrefix(last, "0x"); ok {
		last = hex
		return strings.Trim(last, "0123456789abcdef") == ""
	}
	return last != "" && strings.Trim(last, "0123456789") == ""
}

// parseLegacyIPv4 reads the forms inet_aton accepts: one to four parts,
// each decimal, octal (leading 0) or hex (0x), the last filling the
// remaining bytes ("127.1" is 127.0.0.1, "2130706433" is 127.0.0.1).
func parseLegacyIPv4(host string) (netip.Addr, bool) {
	parts := strings.Split(host, ".")
	if len(parts) > 4 {
		return netip.Addr{}, false
	}
	var vals []uint64
	for _, s := range parts {
		base := 10
		switch {
		case strings.HasPrefix(s, "0x"):
			s, base = s[2:], 16
			if s == "" {
				s = "0"
			}
		case len(s) > 1 && s[0] == '0':
			s, base = s[1:], 8
		}
		v, err := strconv.ParseUint(s, base, 32)
		if err != nil {
			return netip.Addr{}, false
		}
		vals = append(vals, v)
	}
	var n uint64
	for _, v := range vals[:len(vals)-1] {
		if v > 0xff {
			return netip.Addr{}, false
		}
		n = n<<8 | v
	}
	rest := 8 * uint(5-len(vals)) // bits the last part fills
	last := vals[len(vals)-1]
	if last >= 1<<rest {
		return netip.Addr{}, false
	}
	n = n<<rest | last
	return netip.AddrFrom4([4]byte{byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)}), true
}
