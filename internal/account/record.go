// Package account manages organisations, users and their roles, API keys and
// worker tokens, and answers "who is this credential" on every request.
//
// Accounts are few and read on every request, so the whole set lives in
// memory and every change is written through to the Store before it is
// applied. Only the server process opens the store, so memory and disk never
// disagree; where replicas share one (a SharedStore), each follows the
// others' changes by Reload and decides its own on freshly loaded records.
package account

import (
	"errors"
	"time"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/auth"
)

// Org is the stored form of an organisation.
type Org struct {
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Plan      api.Plan        `json:"plan"`
	Settings  api.OrgSettings `json:"settings"`
	CreatedAt time.Time       `json:"created_at"`
	// Approved are the workers the organisation approved, by worker id:
	// kept whatever the setting, so that turning approval off and on
	// again does not ask again. Replaced, never changed in place.
	Approved map[string]Approval `json:"approved_workers,omitempty"`
}

// Approval is the stored form of a worker's approval.
type Approval struct {
	Name string    `json:"name"`
	At   time.Time `json:"at"`
	By   string    `json:"by"`
}

// User is the stored form of a user.
type User struct {
	ID        string    `json:"id"`
	Name      string    `json:"name"`
	CreatedAt time.Time `json:"created_at"`
}

// Member is a user's role in an organisation.
type Member struct {
	OrgID   string    `json:"org_id"`
	UserID  string    `json:"user_id"`
	Role    auth.Role `json:"role"`
	AddedAt time.Time `json:"added_at"`
}

// Key is the stored form of an API key: never the secret, only its hash.
type Key struct {
	ID           string            `json:"id"`
	OrgID        string            `json:"org_id"`
	UserID       string            `json:"user_id"`
	Name         string            `json:"name"`
	Hash         auth.Hash         `json:"hash"`
	Permissions  []auth.Permission `json:"permissions"`
	Unrestricted bool              `json:"unrestricted"`
	// ContentFilter checks the key's chat requests with the organisation's
	// moderation model.
	ContentFilter bool       `json:"content_filter,omitempty"`
	CreatedAt     time.Time  `json:"created_at"`
	RevokedAt     *time.Time `json:"revoked_at,omitempty"`
}

// WorkerToken is the stored form of a worker token.
type WorkerToken struct {
	ID        string     `json:"id"`
	OrgID     string     `json:"org_id"`
	Name      string     `json:"name"`
	Hash      auth.Hash  `json:"hash"`
	CreatedAt time.Time  `json:"created_at"`
	RevokedAt *time.Time `json:"revoked_at,omitempty"`
}

// Records is everything the store holds about accounts.
type Records struct {
	Orgs         []Org
	Users        []User
	Members      []Member
	Keys         []Key
	WorkerTokens []WorkerToken
	// LastUsed maps a credential prefix (auth.PrefixOf) to when it was last
	// presented. It is kept apart from the records because it changes often
	// and is written in the background.
	LastUsed map[string]time.Time
	// Version is a count a SharedStore moves with every change of the
	// records (not of LastUsed); zero from a store of one process.
	Version int64
}

// Store persists account records. Each Write runs in one transaction.
type Store interface {
	LoadAccounts() (Records, error)
	WriteAccounts(fn func(Writer) error) error
}

// SharedStore is a Store that other processes (the gateway's replicas)
// write too. A Service on one reloads the records before deciding a
// change, and writes it only if nobody else wrote since, so that no
// replica's change is lost under another's decided on stale records.
type SharedStore interface {
	Store
	// WriteAccountsIf runs fn in one transaction if the records are still
	// at version (Records.Version) and returns the version they are at
	// after it; an error wrapping ErrStale if another process wrote since,
	// in which case fn was not called.
	WriteAccountsIf(version int64, fn func(Writer) error) (int64, error)
}

// ErrStale means the records changed in another process since they were
// loaded.
var ErrStale = errors.New("the account records changed in another process")

// Writer changes records inside one store transaction.
type Writer interface {
	PutOrg(Org) error
	PutUser(User) error
	PutMember(Member) error
	DeleteMember(orgID, userID string) error
	PutKey(Key) error
	PutWorkerToken(WorkerToken) error
	PutLastUsed(prefix string, t time.Time) error
}
