package rental

import (
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/money"
)

// record is a rental as the ledger keeps it.
type record struct {
	ID         string    `json:"id"`
	OrgID      string    `json:"org_id"`
	Name       string    `json:"name"`
	GPUModelID string    `json:"gpu_model_id"`
	Label      string    `json:"label"`
	TierID     string    `json:"tier_id"` // requested
	TierLabel  string    `json:"tier_label"`
	Models     []string  `json:"models"`
	Price      money.GBP `json:"price_pence_per_hour"`
	Status     string    `json:"status"`
	WorkerID   string    `json:"worker_id"`
	TokenID    string    `json:"token_id"`
	// KeyID is the API key that asked for the rental (the rate limit's
	// count); empty in records from before it was kept.
	KeyID     string    `json:"key_id,omitempty"`
	CreatedAt time.Time `json:"created_at"`
	// StartedAt is when the worker first connected: billing starts there.
	StartedAt *time.Time `json:"started_at,omitempty"`
	// StopRequestedAt is when a stop was asked for (or decided): billing
	// ends there, even if the provider takes a while to confirm.
	StopRequestedAt *time.Time `json:"stop_requested_at,omitempty"`
	StopReason      string     `json:"stop_reason,omitempty"`
	// StoppedAt is set once the provider confirmed the machine is gone.
	StoppedAt *time.Time `json:"stopped_at,omitempty"`
	Error     string     `json:"error,omitempty"`
	BootPhase string     `json:"boot_phase,omitempty"`

	// Placement: where the machine is, once the provider has it.
	Provider   string     `json:"provider"`
	InstanceID string     `json:"instance_id,omitempty"`
	Placed     *Offer     `json:"placed,omitempty"`
	PlacedAt   *time.Time `json:"placed_at,omitempty"`

	// Refused marks a rental no provider placed, whose request was
	// answered with the refusal (409, 502): no rental of the
	// organisation's, only the ledger's record of the attempt.
	Refused bool `json:"refused,omitempty"`

	// Installed are the requested variants the worker has installed.
	Installed []string         `json:"installed,omitempty"`
	Notes     []api.RentalNote `json:"notes"`
}

// downloads is the live progress of a rental's installs, by variant id:
// the share done (0..1). It is not kept in the ledger; the worker reports
// it again.
type downloads map[string]float64

func (r *record) note(at time.Time, typ, detail string) {
	r.Notes = append(r.Notes, api.RentalNote{At: at, Type: typ, Detail: detail})
}

func (r *record) active() bool { return r.Status != api.RentalStopped }

// view is the rental as the API shows it at now.
func (r *record) view(now time.Time, dl downloads, sizes func(string) float64) api.Rental {
	secs := r.billedSeconds(r.billingEnd(now))
	v := api.Rental{
		ID: r.ID, Name: r.Name, GPUModelID: r.GPUModelID, Label: r.Label,
		RequestedTierID: r.TierID, TierLabel: r.TierLabel, Status: r.Status, WorkerID: r.WorkerID,
		Models: append([]string{}, r.Models...), PricePerHourGBP: r.Price,
		AccruedCostGBP: cost(r.Price, secs), HoursBilled: hours(secs), SecondsBilled: secs,
		// Its worker is disconnected when it stops (the spec's DELETE).
		Connected: r.StartedAt != nil && r.Status != api.RentalStopped, StartedAt: r.StartedAt, StoppedAt: r.StoppedAt,
		CreatedAt: r.CreatedAt, Provider: r.Provider,
	}
	if r.Error != "" {
		e := r.Error
		v.Error = &e
	}
	if r.BootPhase != "" {
		p := r.BootPhase
		v.BootPhase = &p
	}
	// An install is in flight from the worker's connection until the
	// model is installed or its install failed, reported started or not
	// yet: a client that waits for model_download to turn null, as the
	// spec has it wait, must not find it null before the first report.
	if r.Status != api.RentalStopped && (len(dl) > 0 || r.StartedAt != nil && r.installPending()) {
		var total, done float64
		for _, id := range r.Models {
			size := sizes(id) * 1e9
			total += size
			switch share, ok := dl[id]; {
			case ok:
				done += share * size
			case r.installed(id):
				done += size
			}
		}
		if total > 0 {
			v.ModelDownload = &api.ModelDownload{Total: int64(total), Completed: int64(done),
				ProgressPct: float64(int64(done/total*1000)) / 10}
		}
	}
	return v
}

// billingEnd is the instant billing is counted to: the stop request, once
// there is one, else now.
func (r *record) billingEnd(now time.Time) time.Time {
	if r.StopRequestedAt != nil && r.StopRequestedAt.Before(now) {
		return *r.StopRequestedAt
	}
	return now
}

func (r *record) installed(id string) bool { return slices.Contains(r.Installed, id) }

// installPending reports whether a requested model is neither installed
// nor failed to install.
func (r *record) installPending() bool {
	for _, id := range r.Models {
		if !r.installed(id) && !r.installFailed(id) {
			return true
		}
	}
	return false
}

// installFailed reports whether the worker said the model's install
// failed and has not installed it since.
func (r *record) installFailed(id string) bool {
	return slices.ContainsFunc(r.Notes, func(n api.RentalNote) bool {
		return n.Type == "model_"+api.InstallFailed && n.Detail == id
	})
}

// placement is the audit view.
func (r *record) placement() (api.Placement, bool) {
	if r.Placed == nil || r.PlacedAt == nil {
		return api.Placement{}, false
	}
	t, _ := tierByID(r.Placed.TierID)
	return api.Placement{
		RentalID: r.ID, Provider: r.Provider, InstanceID: r.InstanceID,
		TierID: t.ID, TierLabel: t.Label, Region: r.Placed.Region, Country: r.Placed.Country,
		OperatorEntity: r.Placed.OperatorEntity, OperatorDomicile: r.Placed.OperatorDomicile,
		PlacedAt: *r.PlacedAt, Events: append([]api.RentalNote{}, r.Notes...),
	}, true
}

// OfOrg picks the records of orgID's rentals out of records, for a ledger
// that keeps no index by organisation: rentals are few.
func OfOrg(records [][]byte, orgID string) ([][]byte, error) {
	var out [][]byte
	for _, b := range records {
		var head struct {
			OrgID string `json:"org_id"`
		}
		if err := json.Unmarshal(b, &head); err != nil {
			return nil, fmt.Errorf("decode rental: %w", err)
		}
		if head.OrgID == orgID {
			out = append(out, b)
		}
	}
	return out, nil
}

// accountsFor is whether r, which may be nil, is a running rental whose
// machine inst at provider is: its own, or one it was placing when its
// answer was lost.
func (r *record) accountsFor(provider string, inst Instance) bool {
	return r != nil && r.active() && r.Provider == provider && (r.InstanceID == "" || r.InstanceID == inst.ID)
}
