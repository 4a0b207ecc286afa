package rental

import (
	"context"
	"errors"
	"time"
)

// Provider places GPU machines. Every method talks to the provider live;
// the manager caches what it needs.
type Provider interface {
	// Name is the provider's id in rentals and placement records ("local",
	// "lambda").
	Name() string
	// Offers lists the kinds of machine the provider can place, with
	// whether each has capacity now.
	Offers(ctx context.Context) ([]Offer, error)
	// Create places a machine for a rental and starts it with the launch's
	// worker. It returns ErrNoCapacity when the offer has none now.
	Create(ctx context.Context, l Launch) (Instance, error)
	// Status reports a machine; ErrNotFound once the provider has no such
	// machine any more.
	Status(ctx context.Context, id string) (Instance, error)
	// Destroy terminates a machine and returns nil only once the provider
	// confirms it is terminated (or has no such machine).
	Destroy(ctx context.Context, id string) error
	// List returns the machines the provider runs for this gateway (those
	// created with a rental id), for reconciliation.
	List(ctx context.Context) ([]Instance, error)
}

// Errors a provider returns.
var (
	ErrNoCapacity = errors.New("no capacity for that machine now")
	ErrNotFound   = errors.New("no such machine at the provider")
)

// Offer is a kind of machine a provider can place.
type Offer struct {
	// GPUModelID is the catalogue's id of the GPU ("h100-80gb").
	GPUModelID string
	Label      string // "H100 80GB"
	Vendor     string // "NVIDIA"
	Model      string // "H100"
	Generation string // "Hopper"
	VRAMGB     float64
	GPUCount   int
	// RAMGB is the machine's system memory; 0 when unknown.
	RAMGB float64
	// TierID is the jurisdiction tier the placement satisfies (TierFor).
	TierID string
	// Region is the provider's region name; Country its ISO 3166-1
	// alpha-2 code.
	Region  string
	Country string
	// OperatorEntity is the legal entity that runs the machine and
	// OperatorDomicile the country (ISO 3166-1 alpha-2) it is domiciled in.
	OperatorEntity   string
	OperatorDomicile string
	// PriceMinor is the provider's price per hour in minor units of
	// Currency (ISO 4217: "USD", "GBP").
	PriceMinor int64
	Currency   string
	// Available is whether the provider has capacity for it now.
	Available bool
	// Ref is the provider's own name for the offer (an instance type),
	// what Create needs besides the region.
	Ref string
}

// Launch is what Create needs to start a rental's machine.
type Launch struct {
	RentalID string
	Offer    Offer
	// Worker is how the machine's svc worker connects.
	Worker WorkerSpec
	// BootScript is the shell script a cloud machine runs at first boot
	// (BootScript builds it); providers that start the worker themselves
	// ignore it.
	BootScript string
}

// WorkerSpec is the svc worker a rental's machine runs.
type WorkerSpec struct {
	Gateway string // URL the worker dials
	Token   string // the rental's worker token (a secret)
	Name    string // the worker's name, which makes its worker id
	// Models are the variant ids to install at boot.
	Models []Variant
	// MaxRuntime, when set, is how long the machine may run before it
	// shuts itself down, whatever the gateway says.
	MaxRuntime time.Duration
}

// Instance states.
const (
	InstancePending    = "pending"    // being placed or booting
	InstanceRunning    = "running"    // up; its worker may or may not have connected
	InstanceTerminated = "terminated" // gone, or going
	InstanceFailed     = "failed"     // the provider gave up on it
)

// Instance is a machine at a provider.
type Instance struct {
	ID       string
	RentalID string
	State    string
	// BootPhase is the last boot milestone the provider saw (api.Boot*),
	// "" when it cannot tell.
	BootPhase string
	// Error says why a failed instance failed.
	Error  string
	Region string
}
