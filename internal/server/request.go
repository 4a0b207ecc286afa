package server

import (
	"strconv"
	"strings"

	"github.com/svc-dev/svc/internal/api"
)

// query reads and validates query parameters, collecting failures as a 422.
type query struct {
	c *call
	v api.Validator
}

// intRange reads an optional integer parameter within [lo, hi].
func (q *query) intRange(name string, def, lo, hi int) int {
	raw := q.c.ctx.QueryArgs().Peek(name)
	if raw == nil {
		return def
	}
	n, err := strconv.Atoi(string(raw))
	switch {
	case err != nil:
		q.v.Add(name, api.FieldWrongType, "expected an integer")
	case n < lo || n > hi:
		q.v.Add(name, api.FieldOutOfRange, "must be between %d and %d", lo, hi)
	default:
		return n
	}
	return def
}

// oneOf reads an optional parameter that must be one of allowed.
func (q *query) oneOf(name, def string, allowed ...string) string {
	raw := q.c.ctx.QueryArgs().Peek(name)
	if raw == nil {
		return def
	}
	for _, a := range allowed {
		if string(raw) == a {
			return a
		}
	}
	q.v.Add(name, api.FieldEnum, "one of %s", strings.Join(allowed, ", "))
	return def
}

// powerQuery checks the power endpoint's range.
func powerQuery(q *query) { q.oneOf("range", "1h", "1h", "24h", "7d", "30d") }

// validated checks the query with check before calling next.
func validated(check func(*query), next func(*call) error) func(*call) error {
	return func(c *call) error {
		q := query{c: c}
		check(&q)
		if err := q.v.Err(); err != nil {
			return err
		}
		return next(c)
	}
}
