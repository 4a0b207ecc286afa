package api

import (
	"time"

	"github.com/svc-dev/svc/internal/money"
)

// Rental statuses.
const (
	RentalProvisioning = "provisioning"
	RentalRunning      = "running"
	RentalStopped      = "stopped"
)

// Boot phases a rental goes through, in order. A provider reports the
// ones it can see; the gateway adds worker_connected and ready.
const (
	BootQueued          = "queued"           // accepted, waiting for the provider
	BootAllocating      = "allocating"       // the provider is finding a machine
	BootPullingImage    = "pulling_image"    // the machine fetches the worker
	BootRuntimeReady    = "runtime_ready"    // the worker's runtime is in place
	BootWorkerStarted   = "worker_started"   // the worker process runs
	BootWorkerConnected = "worker_connected" // the worker dialled the gateway
	BootReady           = "ready"            // connected, every requested model installed
)

// CatalogueEntry is an entry of GET /api/v1/compute/catalogue.
type CatalogueEntry struct {
	GPUModelID string  `json:"gpu_model_id"`
	Label      string  `json:"label"`
	Vendor     string  `json:"vendor"`
	Model      string  `json:"model"`
	Generation string  `json:"generation"`
	VRAMGB     float64 `json:"vram_gb"`
	GPUCount   int     `json:"gpu_count"`
	Tiers      []Tier  `json:"tiers"`
}

// Tier is one jurisdiction tier a GPU can be placed in.
type Tier struct {
	TierID          string    `json:"tier_id"`
	Label           string    `json:"label"`
	Rank            int       `json:"rank"`
	Description     string    `json:"description"`
	PricePerHourGBP money.GBP `json:"price_per_hour_gbp"`
	// Allowed is false when the organisation's jurisdiction floor rules
	// the tier out.
	Allowed bool `json:"allowed"`
	// Available is a best-effort signal that the tier has capacity now.
	Available bool `json:"available"`
	// MaxRAMGB is the most system memory any machine serving the tier
	// has; nil is unknown and never rules the GPU out.
	MaxRAMGB *float64 `json:"max_ram_gb"`
}

// RentableModel is an entry of GET /api/v1/compute/models.
type RentableModel struct {
	ModelID          string    `json:"model_id"`
	Name             string    `json:"name"`
	Publisher        string    `json:"publisher"`
	ParameterSize    string    `json:"parameter_size"`
	DefaultVariantID string    `json:"default_variant_id"`
	Variants         []Variant `json:"variants"`
}

// Variant is one way a rentable model can be installed.
type Variant struct {
	VariantID     string  `json:"variant_id"`
	Label         string  `json:"label"`
	ParameterSize string  `json:"parameter_size"`
	Quantization  string  `json:"quantization"`
	MinVRAMGB     float64 `json:"min_vram_gb"`
	// MinRAMGB is the system memory a model that keeps part of itself in
	// system memory needs; nil when it has no such need.
	MinRAMGB *float64 `json:"min_ram_gb,omitempty"`
	// DownloadGB is how much an install fetches (an extension).
	DownloadGB float64 `json:"download_gb,omitempty"`
}

// RentRequest is the body of POST /api/v1/compute/instances.
type RentRequest struct {
	GPUModelID string   `json:"gpu_model_id"`
	TierID     string   `json:"tier_id"`
	Models     []string `json:"models,omitempty"`
	Name       string   `json:"name,omitempty"`
}

// Rental is a rented GPU instance.
type Rental struct {
	ID              string         `json:"id"`
	Name            string         `json:"name"`
	GPUModelID      string         `json:"gpu_model_id"`
	Label           string         `json:"label"`
	RequestedTierID string         `json:"requested_tier_id"`
	TierLabel       string         `json:"tier_label"`
	Status          string         `json:"status"`
	WorkerID        string         `json:"worker_id"`
	Models          []string       `json:"models"`
	PricePerHourGBP money.GBP      `json:"price_per_hour_gbp"`
	AccruedCostGBP  money.GBP      `json:"accrued_cost_gbp"`
	HoursBilled     float64        `json:"hours_billed"`
	Connected       bool           `json:"connected"`
	StartedAt       *time.Time     `json:"started_at"`
	StoppedAt       *time.Time     `json:"stopped_at"`
	CreatedAt       time.Time      `json:"created_at"`
	Error           *string        `json:"error"`
	BootPhase       *string        `json:"boot_phase"`
	ModelDownload   *ModelDownload `json:"model_download"`
	// SecondsBilled is the exact billed time (an extension): hours_billed
	// is it over 3,600, rounded for display.
	SecondsBilled int64 `json:"seconds_billed"`
	// Provider names where the rental runs (an extension).
	Provider string `json:"provider"`
	// Serving is false for a rental whose worker is not connected and
	// healthy now, as the spend report's lines have it (an extension):
	// connected stays true once the worker has connected, as the spec
	// defines it, and a running rental that is not serving is billed for
	// nothing. Nil from a gateway of an older release, which does not
	// send it.
	Serving *bool `json:"serving"`
}

// ModelDownload is the progress of a rental's model installs, in bytes.
type ModelDownload struct {
	Total       int64   `json:"total"`
	Completed   int64   `json:"completed"`
	ProgressPct float64 `json:"progress_pct"`
}

// Placement is GET /api/v1/compute/instances/{id}/audit: where a rental
// was placed, and everything that happened to it.
type Placement struct {
	RentalID string `json:"rental_id"`
	Provider string `json:"provider"`
	// InstanceID is the provider's own id for the machine.
	InstanceID       string       `json:"instance_id"`
	TierID           string       `json:"tier_id"`
	TierLabel        string       `json:"tier_label"`
	Region           string       `json:"region"`
	Country          string       `json:"country"`
	OperatorEntity   string       `json:"operator_legal_entity"`
	OperatorDomicile string       `json:"operator_domicile"`
	PlacedAt         time.Time    `json:"placed_at"`
	Events           []RentalNote `json:"events"`
}

// RentalNote is one entry of a rental's history.
type RentalNote struct {
	At     time.Time `json:"at"`
	Type   string    `json:"type"`
	Detail string    `json:"detail,omitempty"`
}

// SpendReport is GET /api/v1/compute/spend: the current calendar month.
type SpendReport struct {
	PeriodStart      time.Time   `json:"period_start"`
	MonthToDateGBP   money.GBP   `json:"month_to_date_gbp"`
	MonthlyBudgetGBP *money.GBP  `json:"monthly_budget_gbp"`
	ActiveCount      int         `json:"active_count"`
	Lines            []SpendLine `json:"lines"`
	// CreditRemainingGBP is the organisation's credit less what every
	// rental has cost (an extension).
	CreditRemainingGBP money.GBP `json:"credit_remaining_gbp"`
}

// SpendLine is one rental's part of the month.
type SpendLine struct {
	RentalID        string     `json:"rental_id"`
	GPUModelID      string     `json:"gpu_model_id"`
	Label           string     `json:"label"`
	TierLabel       string     `json:"tier_label"`
	Status          string     `json:"status"`
	PricePerHourGBP money.GBP  `json:"price_per_hour_gbp"`
	Hours           float64    `json:"hours"`
	CostGBP         money.GBP  `json:"cost_gbp"`
	StartedAt       *time.Time `json:"started_at"`
	StoppedAt       *time.Time `json:"stopped_at"`
	// Serving is false for a running rental whose worker is not connected
	// now: billed but not serving (an extension).
	Serving bool `json:"serving"`
}
