package netguard

import (
	"net/netip"
	"testing"
)

func TestRefusedAddr(t *testing.T) {
	refused := []string{
		"0.0.0.0", "0.1.2.3", "10.0.0.1", "10.255.255.255", "100.64.0.1", "100.127.255.254",
		"127.0.0.1", "127.8.9.10", "169.254.169.254", "172.16.0.1", "172.31.255.255",
		"192.0.0.8", "192.0.2.1", "192.168.0.1", "198.18.0.1", "198.51.100.7", "203.0.113.9",
		"224.0.0.1", "239.255.255.250", "240.0.0.1", "255.255.255.255",
		"::", "::1", "::127.0.0.1", "::8.8.8.8", "::ffff:127.0.0.1", "::ffff:10.0.0.1", "::ffff:169.254.169.254",
		"64:ff9b::10.0.0.1", "64:ff9b::7f00:1", "64:ff9b:1::1", "100::1", "2001::1", "2001:db8::1",
		"2002:7f00:1::", "2002:c0a8:101::1", "fc00::1", "fd00::1", "fe80::1", "fe80::1%eth0", "febf::1", "fec0::1",
		"ff02::1", "ff05::1:3", "::ffff:0:127.0.0.1", "::ffff:0:8.8.8.8",
	}
	allowed := []string{
		"1.1.1.1", "8.8.8.8", "93.184.216.34", "100.63.255.255", "100.128.0.1", "172.15.255.255", "172.32.0.1",
		"192.167.255.255", "192.169.0.1", "223.255.255.255", "169.253.0.1",
		"2606:4700::1111", "2a00:1450:4001::200e", "::ffff:8.8.8.8", "64:ff9b::808:808", "2002:808:808::1",
	}
	for _, s := range refused {
		if RefusedAddr(netip.MustParseAddr(s)) == "" {
			t.Errorf("%s allowed", s)
		}
	}
	for _, s := range allowed {
		if why := RefusedAddr(netip.MustParseAddr(s)); why != "" {
			t.Errorf("%s refused: %s", s, why)
		}
	}
}

func TestParseLegacyIPv4(t *testing.T) {
	tests := map[string]string{
		"2130706433":      "127.0.0.1",
		"0177.0.0.1":      "127.0.0.1",
		"0x7f.0.0.1":      "127.0.0.1",
		"0x7f000001":      "127.0.0.1",
		"0x7F.1":          "127.0.0.1",
		"127.1":           "127.0.0.1",
		"127.0.1":         "127.0.0.1",
		"10.1":            "10.0.0.1",
		"017700000001":    "127.0.0.1",
		"0":               "0.0.0.0",
		"0x":              "0.0.0.0",
		"3232235777":      "192.168.1.1",
		"1.2.3.4":         "1.2.3.4",
		"4294967295":      "255.255.255.255",
		"4294967296":      "",
		"256.1.1.1":       "",
		"1.2.3.256":       "",
		"1.2.65536":       "",
		"1.2.3.4.5":       "",
		"08.1.1.1":        "",
		"0x1g.1.1.1":      "",
		"1..1":            "",
		"":                "",
		"example.com":     "",
		"99999999999999x": "",
	}
	for in, want := range tests {
		ip, ok := parseLegacyIPv4(in)
		got := ""
		if ok {
			got = ip.String()
		}
		if got != want {
			t.Errorf("parseLegacyIPv4(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestHostVerdict(t *testing.T) {
	tests := []struct {
		host    string
		ip      string // literal expected, "" for a name
		refused bool
	}{
		{"example.com", "", false},
		{"Example.COM.", "", false},
		{"1e100.net", "", false},
		{"8.8.8.8", "8.8.8.8", false},
		{"2606:4700::1111", "2606:4700::1111", false},
		{"127.0.0.1", "127.0.0.1", true},
		{"127.000.000.001", "", true},
		{"0x08.8.8.8", "", true}, // public, but a non-standard form
		{"8.8.2056", "", true},
		{"localhost", "", true},
		{"a.b.localhost.", "", true},
		{"example.123", "", true},
		{"", "", true},
	}
	for _, tt := range tests {
		ip, why := HostVerdict(tt.host)
		if (why != "") != tt.refused {
			t.Errorf("HostVerdict(%q) refused %q, want refused %v", tt.host, why, tt.refused)
		}
		if !tt.refused {
			if got := ""; ip.IsValid() {
				got = ip.String()
				if got != tt.ip {
					t.Errorf("HostVerdict(%q) ip %s, want %q", tt.host, got, tt.ip)
				}
			} else if tt.ip != "" {
				t.Errorf("HostVerdict(%q) gave no ip, want %s", tt.host, tt.ip)
			}
		}
	}
}

func TestLoopbackHost(t *testing.T) {
	for host, want := range map[string]bool{
		"localhost": true, "LocalHost.": true, "app.localhost": true, "127.0.0.1": true, "127.8.9.1": true,
		"::1": true, "::ffff:127.0.0.1": true,
		"": false, "example.com": false, "localhost.example.com": false, "10.0.0.1": false, "0.0.0.0": false,
		"::": false, "2130706433": false,
	} {
		if got := LoopbackHost(host); got != want {
			t.Errorf("LoopbackHost(%q) = %v, want %v", host, got, want)
		}
	}
}
