package cli

import (
	"slices"
	"strings"
)

// shortIDMin is the least of an id the tables show. Ids are UUIDs or a
// kind and hex digits: eight characters tell an organisation's apart, as
// seven tell a repository's commits apart in git.
const shortIDMin = 8

// minPrefix is the shortest start of an id taken as naming it. A shorter
// argument is much likelier a mistyped name than an abbreviation, and
// would name whichever single id happens to start with it.
const minPrefix = 4

// idAbbrev is how much of each id of one table is shown: all of them cut
// to the same length, at least shortIDMin, and longer where two of them
// would otherwise look alike.
type idAbbrev int

// abbrevFor is the abbreviation that tells the ids of items apart.
func abbrevFor[T any](items []T, id func(T) string) idAbbrev {
	n := shortIDMin
	for {
		seen := make(map[string]bool, len(items))
		clash, longer := false, false
		for _, it := range items {
			full := id(it)
			p := full[:min(n, len(full))]
			clash = clash || seen[p]
			longer = longer || len(full) > n
			seen[p] = true
		}
		if !clash || !longer {
			return idAbbrev(n)
		}
		n++
	}
}

func (a idAbbrev) of(id string) string { return id[:min(int(a), len(id))] }

// shortID is one id as a message names it, alone: no other to tell it
// from, at the tables' least length.
func shortID(id string) string { return idAbbrev(shortIDMin).of(id) }

// shortList is ids abbreviated as one table would show them, for messages
// that name several.
func shortList(ids []string) string {
	a := abbrevFor(ids, func(id string) string { return id })
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = a.of(id)
	}
	return strings.Join(out, ", ")
}

// pick finds the one item arg names, by id, by name, or by a unique start
// of an id (the short ids the tables show), in that order: a name is
// meant whole, so it wins over an abbreviation it happens to be. ok is
// false when nothing matches. Two items with the name, or an argument
// that starts two ids, is a usage error listing them. kind names the items
// in messages ("worker", "rental").
func pick[T any](items []T, arg, kind string, id, name func(T) string) (found T, ok bool, err error) {
	var named, prefixed []T
	for _, it := range items {
		switch {
		case id(it) == arg:
			return it, true, nil
		case name(it) == arg:
			named = append(named, it)
		case len(arg) >= minPrefix && strings.HasPrefix(id(it), strings.ToLower(arg)):
			prefixed = append(prefixed, it)
		}
	}
	ids := func(its []T) string {
		s := make([]string, len(its))
		for i, it := range its {
			s[i] = id(it)
		}
		return shortList(s)
	}
	switch {
	case len(named) == 1:
		return named[0], true, nil
	case len(named) > 1:
		return found, false, usageErrorf("%d %ss are named %q (%s): give an id instead", len(named), kind, arg, ids(named))
	case len(prefixed) == 1:
		return prefixed[0], true, nil
	case len(prefixed) > 1:
		return found, false, usageErrorf("%q starts %d %s ids (%s): give more of it", arg, len(prefixed), kind, ids(prefixed))
	case arg != "" && len(arg) < minPrefix && slices.ContainsFunc(items, func(it T) bool { return strings.HasPrefix(id(it), strings.ToLower(arg)) }):
		// Not found for want of length, which the gateway's 404 would
		// not say.
		return found, false, usageErrorf("%q is too short to pick a %s by: give at least %d characters of its id", arg, kind, minPrefix)
	}
	return found, false, nil
}
