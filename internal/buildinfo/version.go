package buildinfo

import (
	"cmp"
	"strconv"
	"strings"
)

// Outdated reports whether a build of version v is behind release latest.
// Versions that are not release-shaped ("dev", a commit hash, "") are never
// flagged: a developer build has no place on the release line, and a false
// "upgrade me" arrow is worse than a missing one.
func Outdated(v, latest string) bool {
	a, ok := parseVersion(v)
	if !ok {
		return false
	}
	b, ok := parseVersion(latest)
	if !ok {
		return false
	}
	return compareVersions(a, b) < 0
}

// semver is a parsed MAJOR[.MINOR[.PATCH]][-PRERELEASE] version.
type semver struct {
	nums [3]int
	pre  []string
}

// parseVersion reads "v1.2.3", "1.2", "1.2.3-rc.1+build" and the like.
func parseVersion(s string) (semver, bool) {
	var v semver
	s = strings.TrimPrefix(strings.TrimSpace(s), "v")
	if i := strings.IndexByte(s, '+'); i >= 0 {
		s = s[:i]
	}
	core, pre, hasPre := strings.Cut(s, "-")
	parts := strings.Split(core, ".")
	if core == "" || len(parts) > 3 {
		return v, false
	}
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 {
			return v, false
		}
		v.nums[i] = n
	}
	if hasPre {
		if pre == "" {
			return v, false
		}
		v.pre = strings.Split(pre, ".")
	}
	return v, true
}

// compareVersions orders versions by semver precedence: numbers first,
// then a pre-release sorts before its release.
func compareVersions(a, b semver) int {
	for i := range a.nums {
		if c := cmp.Compare(a.nums[i], b.nums[i]); c != 0 {
			return c
		}
	}
	switch {
	case len(a.pre) == 0 && len(b.pre) == 0:
		return 0
	case len(a.pre) == 0:
		return 1
	case len(b.pre) == 0:
		return -1
	}
	for i := 0; i < len(a.pre) && i < len(b.pre); i++ {
		x, y := a.pre[i], b.pre[i]
		xn, xerr := strconv.Atoi(x)
		yn, yerr := strconv.Atoi(y)
		var c int
		switch {
		case xerr == nil && yerr == nil:
			c = cmp.Compare(xn, yn)
		case xerr == nil: // numeric identifiers sort first
			c = -1
		case yerr == nil:
			c = 1
		default:
			c = strings.Compare(x, y)
		}
		if c != 0 {
			return c
		}
	}
	return cmp.Compare(len(a.pre), len(b.pre))
}
