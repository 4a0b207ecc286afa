package netguard

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strings"
	"testing"
)

func TestDefaultDialerRefusesAtConnect(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	first := make(chan net.Addr, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			first <- nil
			return
		}
		first <- c.RemoteAddr()
		c.Close()
	}()
	g := &Guard{}
	_, err = g.dial(context.Background(), "tcp", ln.Addr().String())
	if ge, ok := errors.AsType[*Error](err); !ok || !ge.Refused {
		t.Errorf("dial to %s = %v", ln.Addr(), err)
	}
	// Connections are accepted in the order they came: had the refused
	// dial connected, it would come before this one.
	probe, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer probe.Close()
	if got := <-first; got == nil || got.String() != probe.LocalAddr().String() {
		t.Errorf("the listener accepted a connection from %v before the probe from %v", got, probe.LocalAddr())
	}
	for addr, refused := range map[string]bool{"127.0.0.1:443": true, "[::ffff:10.0.0.1]:443": true, "[fe80::1%eth0]:443": true, "93.184.216.34" + ":443": false, "[2606:4700::1111]:443": false, "example.com:443": true} {
		if err := g.Control("tcp", addr, nil); (err != nil) != refused {
			t.Errorf("Control(%s) = %v", addr, err)
		}
	}
}

// An operator's exemption opens exactly one address and port, at every
// check: the URL's host, a name's answers, and the socket's connect.
func TestAllowExemptsOneAddressAndPort(t *testing.T) {
	g := &Guard{
		Allow: []netip.AddrPort{netip.MustParseAddrPort("127.0.0.1:8080")},
		LookupIPAddr: func(context.Context, string) ([]net.IPAddr, error) {
			return []net.IPAddr{{IP: net.ParseIP("127.0.0.1")}}, nil
		},
	}
	if why := g.CheckHost("127.0.0.1", 8080); why != "" {
		t.Errorf("CheckHost(127.0.0.1:8080) = %q", why)
	}
	for _, c := range []struct {
		host string
		port uint16
	}{{"127.0.0.1", 8081}, {"127.0.0.2", 8080}, {"10.0.0.1", 8080}, {"localhost", 8080}} {
		if g.CheckHost(c.host, c.port) == "" {
			t.Errorf("CheckHost(%s, %d) allowed", c.host, c.port)
		}
	}
	if err := g.Control("tcp", "127.0.0.1:8080", nil); err != nil {
		t.Errorf("Control(allowed) = %v", err)
	}
	if err := g.Control("tcp", "127.0.0.1:8081", nil); err == nil {
		t.Error("Control(127.0.0.1:8081) allowed")
	}
	// An exemption written IPv4-mapped is the same address.
	mapped := &Guard{Allow: []netip.AddrPort{netip.MustParseAddrPort("[::ffff:127.0.0.1]:8080")}}
	if why := mapped.CheckHost("127.0.0.1", 8080); why != "" {
		t.Errorf("an IPv4-mapped exemption: CheckHost(127.0.0.1:8080) = %q", why)
	}
	if ips, err := g.resolve(context.Background(), "site.test", 8080); err != nil || len(ips) != 1 {
		t.Errorf("resolve to an allowed address = %v, %v", ips, err)
	}
	if _, err := g.resolve(context.Background(), "site.test", 9999); err == nil {
		t.Error("resolve to 127.0.0.1:9999 allowed")
	}
}

// A name that resolves to a refused IPv4 address is refused naming it as
// the IPv4 address it is, not as IPv4-mapped IPv6, the form the resolver
// hands it over in.
func TestResolvedIPv4IsNamedAsIPv4(t *testing.T) {
	g := &Guard{LookupIPAddr: func(context.Context, string) ([]net.IPAddr, error) {
		return []net.IPAddr{{IP: net.ParseIP("127.0.0.1")}}, nil
	}}
	_, err := g.resolve(context.Background(), "vm", 80)
	if err == nil || !strings.Contains(err.Error(), "vm resolves to a loopback address") || strings.Contains(err.Error(), "IPv4-mapped") {
		t.Fatalf("resolve = %v", err)
	}
}
