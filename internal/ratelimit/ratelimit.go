// Package ratelimit holds each organisation to its limit of inference
// requests a minute: a token bucket per organisation that refills at
// N/60 requests a second and holds ten seconds' worth, so that a client
// may send a short burst without waiting but not a minute's worth at
// once.
//
// The buckets live in memory, in the process that serves the requests.
// In a cluster that is the organisation's home replica, which serves all
// of its requests, so the limit is exact there; a home that moves starts
// the organisation with a full bucket.
package ratelimit

import (
	"fmt"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/svc-dev/svc/internal/api"
)

// Limits are the organisations' buckets.
type Limits struct {
	now func() time.Time
	// buckets holds a *bucket by organisation id. A sync.Map, because
	// every inference request looks its organisation up and a bucket is
	// replaced only when a limit changes.
	buckets sync.Map
}

// bucket is one organisation's limiter and the limit it was made for:
// when the limit changes the bucket is replaced, never changed in place.
type bucket struct {
	perMinute int
	lim       *rate.Limiter
}

// New makes an empty set of buckets that reads the time from now.
func New(now func() time.Time) *Limits { return &Limits{now: now} }

// Allow counts one request of the organisation orgID, whose limit is
// perMinute requests a minute (0: none), and returns nil when it may go
// ahead, or else a KindRateLimited saying when to retry. A refused
// request takes nothing from the bucket: a client retrying too soon does
// not push its next success further away.
func (l *Limits) Allow(orgID string, perMinute int) error {
	if perMinute <= 0 {
		// An organisation with no limit has no bucket; one it had under
		// a limit since lifted goes.
		l.buckets.Delete(orgID)
		return nil
	}
	b := l.bucket(orgID, perMinute)
	now := l.now()
	if b.lim.AllowN(now, 1) {
		return nil
	}
	// AllowN takes nothing when it refuses (a reservation cancelled
	// after the fact is not fully given back while other requests of the
	// organisation reserve at the same time), so the wait is read from the
	// tokens left: the time until there is a whole one.
	wait := time.Duration((1 - b.lim.TokensAt(now)) / float64(b.lim.Limit()) * float64(time.Second))
	return refused(perMinute, wait)
}

// bucket is orgID's bucket for perMinute, made on the organisation's first
// request and made anew when its limit has changed since.
func (l *Limits) bucket(orgID string, perMinute int) *bucket {
	for {
		v, ok := l.buckets.Load(orgID)
		if ok && v.(*bucket).perMinute == perMinute {
			return v.(*bucket)
		}
		b := newBucket(perMinute)
		if !ok {
			if _, loaded := l.buckets.LoadOrStore(orgID, b); !loaded {
				return b
			}
			// Another request made it first: used if its limit is the
			// same, else replaced on the next turn.
			continue
		}
		if l.buckets.CompareAndSwap(orgID, v, b) {
			return b
		}
	}
}

// newBucket is a full bucket of perMinute requests a minute, holding ten
// seconds' worth and at least one.
func newBucket(perMinute int) *bucket {
	burst := max(1, (perMinute+5)/6)
	return &bucket{perMinute: perMinute, lim: rate.NewLimiter(rate.Limit(float64(perMinute)/60), burst)}
}

// refused is the 429 of a request over its organisation's limit: it names
// the limit, since a client cannot learn it otherwise, and Retry-After is
// the wait until the bucket holds a request again, in whole seconds.
func refused(perMinute int, wait time.Duration) *api.Error {
	secs := api.RetrySeconds(wait)
	return &api.Error{Kind: api.KindRateLimited, Code: api.CodeRateLimited, RetryAfter: time.Duration(secs) * time.Second,
		Message: fmt.Sprintf("This organisation's limit of %d requests a minute is reached; retry in %d s", perMinute, secs)}
}
