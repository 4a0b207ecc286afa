package api

import (
	"bytes"
	"encoding/json"
	"time"

	"github.com/svc-dev/svc/internal/money"
)

// Plan is an organisation's subscription.
type Plan string

const (
	PlanFree       Plan = "free"
	PlanPro        Plan = "pro"
	PlanEnterprise Plan = "enterprise"
)

// Plans lists the plans in ascending order.
func Plans() []Plan { return []Plan{PlanFree, PlanPro, PlanEnterprise} }

// Valid reports whether p is a known plan.
func (p Plan) Valid() bool { return p == PlanFree || p == PlanPro || p == PlanEnterprise }

// Paid reports whether the plan includes the Pro features (power history,
// private inference).
func (p Plan) Paid() bool { return p == PlanPro || p == PlanEnterprise }

// RequestsPerMinute is the plan's default limit on an organisation's
// inference requests a minute; 0 is none. Free organisations are held to
// 600 (10 a second, in bursts of up to 100), which no interactive use
// reaches and which keeps one runaway client from taking every worker.
// The paid plans are the operator's own paying organisations: a gateway
// in front of its owner's GPUs does not throttle its owner unasked, so
// they have no limit unless one is set (OrgSettings.RequestsPerMinute).
func (p Plan) RequestsPerMinute() int {
	if p == PlanFree {
		return 600
	}
	return 0
}

// Organization is an organisation as the console shows it.
type Organization struct {
	ID        string      `json:"id"`
	Name      string      `json:"name"`
	Plan      Plan        `json:"plan"`
	Settings  OrgSettings `json:"settings"`
	CreatedAt time.Time   `json:"created_at"`
}

// RequestsPerMinute is the limit the organisation's inference requests are
// held to: its own setting, else its plan's default; 0 is none.
func (o Organization) RequestsPerMinute() int {
	if n := o.Settings.RequestsPerMinute; n != nil {
		return *n
	}
	return o.Plan.RequestsPerMinute()
}

// OrgSettings are the console-only settings of an organisation.
type OrgSettings struct {
	// RequireE2E refuses unencrypted inference requests with 403 e2e_required.
	RequireE2E bool `json:"require_e2e"`
	// ContentFiltering moderates the chat requests of every key of the
	// organisation, as if each had content filtering on.
	ContentFiltering bool `json:"content_filtering"`
	// ModerationModel is the moderation model content filtering checks
	// with; empty means api.DefaultModerationModel.
	ModerationModel string `json:"moderation_model,omitempty"`
	// AllowRemoteImageURLs lets image inputs name https URLs, not only data: URLs.
	AllowRemoteImageURLs bool `json:"allow_remote_image_urls"`
	// JurisdictionFloor is the lowest rental tier the organisation accepts;
	// null accepts every tier.
	JurisdictionFloor *string `json:"jurisdiction_floor"`
	// PaymentCardOnFile records that billing holds a card; card details are
	// never stored here.
	PaymentCardOnFile bool      `json:"payment_card_on_file"`
	CreditBalanceGBP  money.GBP `json:"credit_balance_gbp"`
	// MonthlyBudgetGBP caps rental spend per calendar month; null is no cap.
	MonthlyBudgetGBP *money.GBP `json:"monthly_budget_gbp"`
	// MaxRuntimeSeconds stops a rental automatically after this long; null
	// lets rentals run until stopped.
	MaxRuntimeSeconds *int64 `json:"max_runtime_seconds"`
	// MaxRuntimeSince is when the maximum runtime was last set: a
	// rental already past it then stops then, its bill intact, not when
	// it would have reached it. Absent for settings from before it was
	// kept.
	MaxRuntimeSince *time.Time `json:"max_runtime_since,omitempty"`
	// RequireWorkerApproval makes a worker the organisation has not
	// approved before wait, connected but serving nothing, until an
	// administrator approves it (svc admin workers approve).
	RequireWorkerApproval bool `json:"require_worker_approval"`
	// HomeRegion is the region of the gateway replicas the organisation's
	// workers link to and its requests are served in, on a cluster whose
	// replicas name their regions; empty is wherever its first worker or
	// request lands.
	HomeRegion string `json:"home_region,omitempty"`
	// RequestsPerMinute limits the organisation's inference requests: null
	// is its plan's default (Plan.RequestsPerMinute), 0 no limit, N that
	// many a minute. Organisations stored before the setting read null.
	RequestsPerMinute *int `json:"requests_per_minute"`
}

// User is a person who can hold roles in organisations.
type User struct {
	ID        string    `json:"id"`
	Name      string    `json:"name"`
	CreatedAt time.Time `json:"created_at"`
}

// Member is a user's role in one organisation.
type Member struct {
	UserID  string    `json:"user_id"`
	User    string    `json:"user"`
	Role    string    `json:"role"`
	AddedAt time.Time `json:"added_at"`
}

// APIKey describes a key; Secret is set only in the answer that creates it.
type APIKey struct {
	ID           string   `json:"id"`
	Prefix       string   `json:"prefix"`
	Name         string   `json:"name"`
	UserID       string   `json:"user_id"`
	User         string   `json:"user"`
	Permissions  []string `json:"permissions"`
	Unrestricted bool     `json:"unrestricted"`
	// ContentFilter checks the key's chat requests and replies with the
	// organisation's moderation model.
	ContentFilter bool       `json:"content_filter"`
	CreatedAt     time.Time  `json:"created_at"`
	LastUsedAt    *time.Time `json:"last_used_at"`
	RevokedAt     *time.Time `json:"revoked_at"`
	Secret        string     `json:"secret,omitempty"`
}

// WorkerToken describes a token worker agents connect with; Secret is set
// only in the answer that creates it.
type WorkerToken struct {
	ID         string     `json:"id"`
	Prefix     string     `json:"prefix"`
	Name       string     `json:"name"`
	CreatedAt  time.Time  `json:"created_at"`
	LastUsedAt *time.Time `json:"last_used_at"`
	RevokedAt  *time.Time `json:"revoked_at"`
	Secret     string     `json:"secret,omitempty"`
}

// CreateOrgRequest is the body of POST /api/v1/console/orgs.
type CreateOrgRequest struct {
	Name string `json:"name"`
	Plan Plan   `json:"plan,omitempty"`
}

// OrgPatch is the body of PATCH /api/v1/console/orgs/{org}: only the fields
// present change, and null clears the nullable ones.
type OrgPatch struct {
	Plan                 Optional[Plan]      `json:"plan,omitzero"`
	RequireE2E           Optional[bool]      `json:"require_e2e,omitzero"`
	ContentFiltering     Optional[bool]      `json:"content_filtering,omitzero"`
	AllowRemoteImageURLs Optional[bool]      `json:"allow_remote_image_urls,omitzero"`
	ModerationModel      Optional[string]    `json:"moderation_model,omitzero"`
	JurisdictionFloor    Optional[string]    `json:"jurisdiction_floor,omitzero"`
	PaymentCardOnFile    Optional[bool]      `json:"payment_card_on_file,omitzero"`
	MonthlyBudgetGBP     Optional[money.GBP] `json:"monthly_budget_gbp,omitzero"`
	MaxRuntimeSeconds    Optional[int64]     `json:"max_runtime_seconds,omitzero"`
	// RequireWorkerApproval, turned on, counts the workers listed then
	// as approved: only workers seen afterwards wait.
	RequireWorkerApproval Optional[bool] `json:"require_worker_approval,omitzero"`
	// HomeRegion, null or empty for none.
	HomeRegion Optional[string] `json:"home_region,omitzero"`
	// RequestsPerMinute, null for the plan's default, 0 for no limit.
	RequestsPerMinute Optional[int] `json:"requests_per_minute,omitzero"`
}

// WorkerApproval records that an organisation approved a worker: its
// requests may be routed to it while the organisation requires approval.
type WorkerApproval struct {
	WorkerID   string    `json:"worker_id"`
	WorkerName string    `json:"worker_name"`
	ApprovedAt time.Time `json:"approved_at"`
	// By says who approved it: "svc admin", or the setting that counted
	// it approved when it was turned on.
	By string `json:"by"`
	// Connected is whether the worker is connected to this gateway now;
	// false for one approved before it first connects.
	Connected bool `json:"connected"`
}

// ApproveWorkerRequest is the body of POST
// /api/v1/console/orgs/{org}/workers/approve: Worker is a worker's name
// or id (wk_...).
type ApproveWorkerRequest struct {
	Worker string `json:"worker"`
}

// CreditRequest adds (or, when negative, takes away) credit.
type CreditRequest struct {
	AmountGBP money.GBP `json:"amount_gbp"`
}

// CreateUserRequest is the body of POST /api/v1/console/users.
type CreateUserRequest struct {
	Name string `json:"name"`
}

// SetMemberRequest is the body of PUT /api/v1/console/orgs/{org}/members/{user}.
type SetMemberRequest struct {
	Role string `json:"role"`
}

// CreateKeyRequest is the body of POST /api/v1/console/orgs/{org}/keys.
// Without permissions the key gets the defaults (everything but GPU rental).
type CreateKeyRequest struct {
	User         string   `json:"user"`
	Name         string   `json:"name"`
	Permissions  []string `json:"permissions,omitempty"`
	Unrestricted bool     `json:"unrestricted,omitempty"`
	// ContentFilter turns content filtering on for the key.
	ContentFilter bool `json:"content_filter,omitempty"`
}

// CreateWorkerTokenRequest is the body of POST /api/v1/console/orgs/{org}/worker-tokens.
type CreateWorkerTokenRequest struct {
	Name string `json:"name"`
}

// Health is the body of GET /healthz, which answers 200 while the
// gateway runs: Status is "ok", or "degraded" while Store says its writes
// fail. A restart would not help a store that cannot write, and would lose
// the rows waiting to be written.
type Health struct {
	Status  string `json:"status"`
	Version string `json:"version"`
	// Store is the state of the usage store's writes; absent where the
	// gateway has none to tell (a test's).
	Store *StoreHealth `json:"store,omitempty"`
	// Cluster is this replica's place in a cluster of replicas on one
	// database; absent on a single host.
	Cluster *ClusterHealth `json:"cluster,omitempty"`
}

// ClusterHealth is a replica's view of its cluster.
type ClusterHealth struct {
	ReplicaID string `json:"replica_id"`
	// Role is "leader" (runs the cluster's once-only duties: retention,
	// the sweep of the rental providers) or "standby".
	Role string `json:"role"`
	// Homes is how many organisations this replica is the home of: it
	// holds their workers' links and serves their requests.
	Homes int   `json:"homes"`
	Epoch int64 `json:"epoch"`
	// Leader and LeaderURL name the leader; empty while none is known.
	Leader    string `json:"leader,omitempty"`
	LeaderURL string `json:"leader_url,omitempty"`
	// DatabaseUnreachableS is how long the database has not answered
	// the replica's lease renewals; 0 while it answers.
	DatabaseUnreachableS float64 `json:"database_unreachable_s"`
	// The usage rows, events and power reports recorded here and not
	// yet in the database.
	OutboxRecords int64      `json:"outbox_records"`
	OutboxOldest  *time.Time `json:"outbox_oldest,omitempty"`
}

// Readiness is the answer of /readyz: whether a load balancer should send
// this replica requests.
type Readiness struct {
	Ready bool `json:"ready"`
	// Reason says why not.
	Reason string `json:"reason,omitempty"`
	// UnreachablePeers are the peer replicas a forwarded request could
	// not reach lately.
	UnreachablePeers []string `json:"unreachable_peers,omitempty"`
}

// Health statuses and store states.
const (
	HealthOK       = "ok"
	HealthDegraded = "degraded"
	// StoreOK: writes are committed as they come.
	StoreOK = "ok"
	// StoreRetrying: writes fail (a full disk); usage rows, events and
	// power reports are kept in memory and retried, and inference is
	// served.
	StoreRetrying = "retrying"
	// StoreRefusing: the rows kept have reached their bound; new inference
	// gets a 503 until they are written.
	StoreRefusing = "refusing"
)

// StoreHealth is the state of the usage store's writes in GET /healthz.
type StoreHealth struct {
	State string `json:"state"`
	// Error says why writes fail ("disk full"), while they do.
	Error        string     `json:"error,omitempty"`
	FailingSince *time.Time `json:"failing_since,omitempty"`
	// What waits to be written, and the bound on the memory it holds.
	PendingUsageRows    int   `json:"pending_usage_rows"`
	PendingEvents       int   `json:"pending_events"`
	PendingPowerReports int   `json:"pending_power_reports"`
	BacklogBytes        int64 `json:"backlog_bytes"`
	BacklogLimitBytes   int64 `json:"backlog_limit_bytes"`
	// Counts since the gateway started.
	FailedCommits       uint64 `json:"failed_commits"`
	DroppedEvents       uint64 `json:"dropped_events"`
	DroppedPowerReports uint64 `json:"dropped_power_reports"`
}

// Optional is a field of a partial update: absent (Set false), null (Set
// and Null) or a value.
type Optional[T any] struct {
	Set   bool
	Null  bool
	Value T
}

// Some is an Optional holding v.
func Some[T any](v T) Optional[T] { return Optional[T]{Set: true, Value: v} }

// Null is an Optional set to null.
func Null[T any]() Optional[T] { return Optional[T]{Set: true, Null: true} }

// IsZero lets omitzero leave out unset fields.
func (o Optional[T]) IsZero() bool { return !o.Set }

// Ptr returns nil for null and a pointer to the value otherwise.
func (o Optional[T]) Ptr() *T {
	if o.Null {
		return nil
	}
	v := o.Value
	return &v
}

// MarshalJSON writes null or the value.
func (o Optional[T]) MarshalJSON() ([]byte, error) {
	if o.Null {
		return []byte("null"), nil
	}
	return json.Marshal(o.Value)
}

// UnmarshalJSON records that the field was present.
func (o *Optional[T]) UnmarshalJSON(b []byte) error {
	o.Set = true
	if bytes.Equal(bytes.TrimSpace(b), []byte("null")) {
		o.Null = true
		return nil
	}
	return json.Unmarshal(b, &o.Value)
}

// ClusterStatus is a cluster as its database holds it (`svc cluster
// status --json`).
type ClusterStatus struct {
	// DatabaseTime is the database's clock, by which every expiry is
	// judged.
	DatabaseTime  time.Time `json:"database_time"`
	SchemaVersion int       `json:"schema_version"`
	// Leader is absent while no replica has ever led.
	Leader   *ClusterLeader   `json:"leader,omitempty"`
	Replicas []ClusterReplica `json:"replicas"`
	// Homes is every organisation's home, by organisation.
	Homes []ClusterHome `json:"homes"`
}

// ClusterHome is an organisation's home replica.
type ClusterHome struct {
	OrgID string `json:"org_id"`
	// ReplicaID is "" while the organisation has no home: the replica
	// its next request or worker reaches claims it.
	ReplicaID string `json:"replica_id"`
	// Epoch grows by one at each change of home.
	Epoch int64 `json:"epoch"`
	// Alive: the home replica's registration is current.
	Alive bool `json:"alive"`
	// Misplaced: the organisation's home_region names another region,
	// where a live replica runs; the home gives it up at its next
	// reading of the homes.
	Misplaced bool `json:"misplaced,omitempty"`
}

// ClusterLeader is the leader lease.
type ClusterLeader struct {
	ReplicaID    string    `json:"replica_id"`
	AdvertiseURL string    `json:"advertise_url"`
	Epoch        int64     `json:"epoch"`
	ExpiresAt    time.Time `json:"expires_at"`
	// Expired: the leader has not renewed it; a standby takes it at its
	// next renewal.
	Expired bool `json:"expired"`
}

// ClusterReplica is one replica's registration.
type ClusterReplica struct {
	ID   string `json:"id"`
	Role string `json:"role"`
	// Region is where the replica runs (svc serve --region); "" for none.
	Region string `json:"region,omitempty"`
	// Stopping: the replica released its homes and takes no more.
	Stopping     bool      `json:"stopping,omitempty"`
	AdvertiseURL string    `json:"advertise_url"`
	Version      string    `json:"version"`
	StartedAt    time.Time `json:"started_at"`
	SeenAt       time.Time `json:"seen_at"`
	ExpiresAt    time.Time `json:"expires_at"`
	// Alive: the registration was renewed within its TTL.
	Alive bool `json:"alive"`
	// Homes is how many organisations the replica is the home of.
	Homes int `json:"homes"`
	// UnreachablePeers are the peers the replica could not reach lately,
	// as it last reported.
	UnreachablePeers []string   `json:"unreachable_peers,omitempty"`
	OutboxRecords    int64      `json:"outbox_records"`
	OutboxOldest     *time.Time `json:"outbox_oldest,omitempty"`
}

// ValidRegion reports whether r can name a region of gateway replicas
// (`svc serve --region`, the home_region setting): 1 to 64 lower-case
// letters, digits, '.', '-' and '_', starting with a letter or digit, as
// cloud regions are written (eu-west-1, us-east4).
func ValidRegion(r string) bool {
	if r == "" || len(r) > 64 {
		return false
	}
	for i := 0; i < len(r); i++ {
		c := r[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		case i > 0 && (c == '.' || c == '-' || c == '_'):
		default:
			return false
		}
	}
	return true
}
