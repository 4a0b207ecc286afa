package buildinfo

import "testing"

func TestOutdated(t *testing.T) {
	for _, tc := range []struct {
		v, latest string
		want      bool
	}{
		{"v1.2.4", "v1.3.0", true},
		{"1.2", "v1.2.1", true},
		{"v1.10.0", "v1.9.0", false}, // numeric, not string, order
		{"v1.3.0", "v1.3.0", false},
		{"1.3.0", "v1.3.0", false},
		{"v1.3.0-rc.2", "v1.3.0", true}, // a pre-release is older than its release
		{"v1.3.0-rc.2", "v1.3.0-rc.10", true},
		{"v1.3.0", "v1.3.0-rc.1", false},
		{"v1.3.0+build.5", "v1.3.0", false},
		{"v2.0.0+build", "v1.9.9", false},
		{"dev", "v1.3.0", false},
		{"", "v1.3.0", false},
		{"abc123f", "v1.3.0", false},
		{"v1.2.0", "", false},
		{"v1.2.0", "dev", false},
	} {
		if got := Outdated(tc.v, tc.latest); got != tc.want {
			t.Errorf("Outdated(%q, %q) = %v, want %v", tc.v, tc.latest, got, tc.want)
		}
	}
}
