package lambda

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/rental"
)

// DefaultBaseURL is the Lambda Cloud API (formerly
// https://cloud.lambdalabs.com/api/v1, which still answers).
const DefaultBaseURL = "https://cloud.lambda.ai/api/v1"

// The operator of every Lambda machine.
const (
	OperatorEntity   = "Lambda, Inc."
	OperatorDomicile = "US"
)

// namePrefix marks the instances this gateway launched: their name is
// the prefix and the rental id, which is how List finds its rentals.
const namePrefix = "svc-"

// Documented limits of a launch request.
const (
	maxNameLen     = 64
	maxUserDataLen = 1 << 20
)

// Config is what a Provider runs with.
type Config struct {
	// BaseURL is the API's base, DefaultBaseURL when empty.
	BaseURL string
	// APIKey is a Lambda Cloud API key (LoadAPIKey finds it).
	APIKey string
	// SSHKeyName is the account's SSH key launched machines get; Lambda
	// requires exactly one. When empty the account's first key is used.
	SSHKeyName string
	HTTPClient *http.Client
	// Poll is how often Destroy asks whether a machine is gone, and the
	// first wait before retrying a failed call (default 5 s; the API
	// allows about one request a second).
	Poll   time.Duration
	Now    func() time.Time
	Logger *slog.Logger
}

// Provider places rentals' machines on Lambda Cloud.
type Provider struct {
	base string
	key  string
	ssh  string
	http *http.Client
	poll time.Duration
	now  func() time.Time
	log  *slog.Logger

	// seen remembers, by instance type, the regions it has had capacity
	// in, so a type with none now can still be shown where it is sold.
	mu   sync.Mutex
	seen map[string]map[string]bool
}

var _ rental.Provider = (*Provider)(nil)

// New returns a Provider; it does not call the API.
func New(cfg Config) (*Provider, error) {
	if strings.TrimSpace(cfg.APIKey) == "" {
		return nil, errors.New("lambda: no API key")
	}
	base := strings.TrimRight(cmp.Or(cfg.BaseURL, DefaultBaseURL), "/")
	if u, err := url.Parse(base); err != nil || u.Scheme == "" || u.Host == "" {
		return nil, fmt.Errorf("lambda: base URL %q is not an absolute URL", base)
	}
	p := &Provider{base: base, key: strings.TrimSpace(cfg.APIKey), ssh: cfg.SSHKeyName,
		http: cfg.HTTPClient, poll: cfg.Poll, now: cfg.Now, log: cfg.Logger, seen: map[string]map[string]bool{}}
	if p.http == nil {
		p.http = &http.Client{Timeout: 30 * time.Second}
	}
	if p.poll <= 0 {
		p.poll = 5 * time.Second
	}
	if p.now == nil {
		p.now = time.Now
	}
	if p.log == nil {
		p.log = slog.New(slog.DiscardHandler)
	}
	return p, nil
}

// Name is the provider's id in rentals.
func (p *Provider) Name() string { return "lambda" }

// The API's shapes, as far as this package reads them.
type (
	region struct {
		Name        string `json:"name"`
		Description string `json:"description"`
	}
	instanceType struct {
		Name              string `json:"name"`
		Description       string `json:"description"`
		GPUDescription    string `json:"gpu_description"`
		PriceCentsPerHour int64  `json:"price_cents_per_hour"`
		Specs             struct {
			VCPUs      int `json:"vcpus"`
			MemoryGiB  int `json:"memory_gib"`
			StorageGiB int `json:"storage_gib"`
			GPUs       int `json:"gpus"`
		} `json:"specs"`
	}
	instance struct {
		ID     string `json:"id"`
		Name   string `json:"name"`
		Status string `json:"status"`
		Region region `json:"region"`
	}
)

// Offers lists one offer per instance type and region with capacity now,
// and, unavailable, the type in the other regions it has had capacity in
// since this Provider started. The API only names regions with capacity,
// so a type never seen with any is listed once, unavailable, with no
// region (and so the global tier): the catalogue can show it, and it is
// never placed.
//
// RAMGB is specs.memory_gib taken as GB: a GiB is 7% more than a GB, so
// the figure understates the machine, and a model's RAM floor never
// admits a machine too small for it.
func (p *Provider) Offers(ctx context.Context) ([]rental.Offer, error) {
	var types map[string]struct {
		InstanceType instanceType `json:"instance_type"`
		Regions      []region     `json:"regions_with_capacity_available"`
	}
	if err := p.call(ctx, http.MethodGet, "/instance-types", nil, &types); err != nil {
		return nil, fmt.Errorf("lambda instance types: %w", err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []rental.Offer
	for name, t := range types {
		it := t.InstanceType
		if it.Name == "" {
			it.Name = name
		}
		m, ok := machineFor(it.Name, it.GPUDescription, it.Specs.GPUs)
		if !ok {
			p.log.Debug("lambda: skipping an instance type the catalogue does not know", "type", it.Name, "gpu", it.GPUDescription)
			continue
		}
		if m.arm64 {
			p.log.Debug("lambda: skipping an ARM instance type the boot script cannot start", "type", it.Name)
			continue
		}
		offer := func(region string, available bool) rental.Offer {
			country := countryOf(region)
			return rental.Offer{
				GPUModelID: m.id(), Label: m.label(), Vendor: "NVIDIA", Model: m.model, Generation: m.generation,
				VRAMGB: m.vramGB, GPUCount: m.count, RAMGB: float64(it.Specs.MemoryGiB),
				TierID: rental.TierFor(country, OperatorDomicile), Region: region, Country: country,
				OperatorEntity: OperatorEntity, OperatorDomicile: OperatorDomicile,
				// Lambda quotes the whole instance's price, all its GPUs.
				PriceMinor: it.PriceCentsPerHour, Currency: "USD",
				Available: available, Ref: it.Name,
			}
		}
		seen := p.seen[it.Name]
		if seen == nil {
			seen = map[string]bool{}
			p.seen[it.Name] = seen
		}
		now := map[string]bool{}
		for _, r := range t.Regions {
			if r.Name == "" || now[r.Name] {
				continue
			}
			now[r.Name], seen[r.Name] = true, true
			out = append(out, offer(r.Name, true))
		}
		for r := range seen {
			if !now[r] {
				out = append(out, offer(r, false))
			}
		}
		if len(seen) == 0 {
			out = append(out, offer("", false))
		}
	}
	slices.SortFunc(out, func(a, b rental.Offer) int {
		return cmp.Or(cmp.Compare(a.Ref, b.Ref), cmp.Compare(a.Region, b.Region))
	})
	return out, nil
}

// Create launches the machine of a rental with its boot script as
// cloud-init user data, named for the rental so List can find it again.
func (p *Provider) Create(ctx context.Context, l rental.Launch) (rental.Instance, error) {
	o := l.Offer
	if o.Region == "" {
		return rental.Instance{}, fmt.Errorf("lambda launch %s: no region has capacity: %w", o.Ref, rental.ErrNoCapacity)
	}
	name := namePrefix + l.RentalID
	switch {
	case l.RentalID == "" || o.Ref == "":
		return rental.Instance{}, errors.New("lambda launch: a rental id and an instance type are needed")
	case len(name) > maxNameLen:
		return rental.Instance{}, fmt.Errorf("lambda launch: rental id %q is too long for an instance name", l.RentalID)
	case len(l.BootScript) > maxUserDataLen:
		return rental.Instance{}, fmt.Errorf("lambda launch: the boot script is %d bytes; Lambda takes at most %d", len(l.BootScript), maxUserDataLen)
	}
	key, err := p.sshKey(ctx)
	if err != nil {
		return rental.Instance{}, fmt.Errorf("lambda launch: %w", err)
	}
	req := struct {
		Region   string   `json:"region_name"`
		Type     string   `json:"instance_type_name"`
		SSHKeys  []string `json:"ssh_key_names"`
		Name     string   `json:"name"`
		Quantity int      `json:"quantity"`
		UserData string   `json:"user_data,omitempty"`
	}{o.Region, o.Ref, []string{key}, name, 1, l.BootScript}
	var res struct {
		IDs []string `json:"instance_ids"`
	}
	err = p.call(ctx, http.MethodPost, "/instance-operations/launch", req, &res)
	var ae *APIError
	switch {
	case errors.As(err, &ae) && ae.Code == codeInsufficientCapacity:
		return rental.Instance{}, fmt.Errorf("lambda launch %s in %s: %s: %w", o.Ref, o.Region, ae.Message, rental.ErrNoCapacity)
	case err != nil && (!errors.As(err, &ae) || ae.Status >= 500):
		// The launch may have happened with its answer lost: a machine
		// named for the rental is the rental's, and adopting it beats
		// leaving it to run unaccounted until the next reconciliation.
		if inst, ok := p.byName(context.WithoutCancel(ctx), name); ok {
			p.log.Warn("lambda: launch failed but its machine exists; adopting it", "rental", l.RentalID, "instance", inst.ID, "err", err)
			return inst, nil
		}
		return rental.Instance{}, fmt.Errorf("lambda launch %s in %s: %w", o.Ref, o.Region, err)
	case err != nil:
		return rental.Instance{}, fmt.Errorf("lambda launch %s in %s: %w", o.Ref, o.Region, err)
	case len(res.IDs) == 0:
		// The API may launch fewer than asked for; none means no room.
		return rental.Instance{}, fmt.Errorf("lambda launch %s in %s: no instance launched: %w", o.Ref, o.Region, rental.ErrNoCapacity)
	}
	return rental.Instance{ID: res.IDs[0], RentalID: l.RentalID, State: rental.InstancePending,
		BootPhase: api.BootAllocating, Region: o.Region}, nil
}

// sshKey is the key to launch with: the configured one, else the
// account's first.
func (p *Provider) sshKey(ctx context.Context) (string, error) {
	if p.ssh != "" {
		return p.ssh, nil
	}
	var keys []struct {
		Name string `json:"name"`
	}
	if err := p.call(ctx, http.MethodGet, "/ssh-keys", nil, &keys); err != nil {
		return "", fmt.Errorf("listing SSH keys: %w", err)
	}
	for _, k := range keys {
		if k.Name != "" {
			return k.Name, nil
		}
	}
	return "", errors.New("the Lambda account has no SSH key, and Lambda launches none without one; add one in the Lambda console or configure its name")
}

// byName finds a live instance by name, within a short bound of its own.
func (p *Provider) byName(ctx context.Context, name string) (rental.Instance, bool) {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	var all []instance
	if err := p.call(ctx, http.MethodGet, "/instances", nil, &all); err != nil {
		return rental.Instance{}, false
	}
	for _, in := range all {
		if in.Name == name && in.Status != "terminated" {
			return toInstance(in), true
		}
	}
	return rental.Instance{}, false
}

// Status reports a machine; ErrNotFound once Lambda has no such machine.
func (p *Provider) Status(ctx context.Context, id string) (rental.Instance, error) {
	in, err := p.get(ctx, id)
	if err != nil {
		return rental.Instance{}, fmt.Errorf("lambda instance %s: %w", id, err)
	}
	return toInstance(in), nil
}

func (p *Provider) get(ctx context.Context, id string) (instance, error) {
	if id == "" || strings.ContainsAny(id, "/?#") {
		return instance{}, rental.ErrNotFound
	}
	var in instance
	err := p.call(ctx, http.MethodGet, "/instances/"+url.PathEscape(id), nil, &in)
	var ae *APIError
	if errors.As(err, &ae) && ae.notFound() {
		return instance{}, fmt.Errorf("%w: %w", rental.ErrNotFound, err)
	}
	return in, err
}

// toInstance maps Lambda's view of a machine to the gateway's. Lambda
// reports "booting" from launch until the machine is up, which is when
// cloud-init runs the boot script; "active" says no more than that the
// machine is up, so the worker's own phases come from the worker.
func toInstance(in instance) rental.Instance {
	out := rental.Instance{ID: in.ID, Region: in.Region.Name}
	if rid, ok := strings.CutPrefix(in.Name, namePrefix); ok {
		out.RentalID = rid
	}
	switch in.Status {
	case "booting":
		out.State, out.BootPhase = rental.InstancePending, api.BootPullingImage
	case "active":
		out.State, out.BootPhase = rental.InstanceRunning, api.BootRuntimeReady
	case "unhealthy":
		out.State, out.Error = rental.InstanceRunning, "unhealthy"
	case "terminating", "terminated":
		out.State = rental.InstanceTerminated
	default:
		out.State = rental.InstancePending
	}
	return out
}

// destroyBound bounds a Destroy whose context has no deadline: it retries
// until Lambda confirms, and must not do so for ever.
const destroyBound = 10 * time.Minute

// Destroy terminates a machine and returns nil once Lambda reports it
// terminated or no longer knows it. A terminate that fails is retried,
// with backoff, until the context ends; so is one that Lambda took but
// that left the machine up.
func (p *Provider) Destroy(ctx context.Context, id string) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, destroyBound)
		defer cancel()
	}
	var last error
	failures := 0
	terminate := true
	for {
		wait := p.poll
		if terminate {
			switch err := p.terminate(ctx, id); {
			case errors.Is(err, rental.ErrNotFound):
				return nil
			case errors.Is(err, ErrUnauthorized):
				return fmt.Errorf("lambda terminate %s: %w", id, err)
			case err != nil:
				last = err
				wait = p.backoff(failures)
				failures++
				p.log.Warn("lambda: terminate failed; retrying", "instance", id, "wait", wait, "err", err)
			}
		}
		// The machine's state says what is left to do, whatever the
		// terminate's answer: one already going may be refused another.
		in, err := p.get(ctx, id)
		switch {
		case errors.Is(err, rental.ErrNotFound):
			return nil
		case errors.Is(err, ErrUnauthorized):
			return fmt.Errorf("lambda instance %s: %w", id, err)
		case err != nil:
			last = err
		case in.Status == "terminated":
			return nil
		default:
			terminate = in.Status != "terminating"
		}
		if err := sleep(ctx, wait); err != nil {
			if last == nil {
				return fmt.Errorf("lambda terminate %s: not confirmed: %w", id, err)
			}
			return fmt.Errorf("lambda terminate %s: not confirmed: %w (last error: %w)", id, err, last)
		}
	}
}

// terminate asks Lambda to terminate one machine. Lambda answers with the
// machines it terminated, which may leave some out: one left out was not
// terminated.
func (p *Provider) terminate(ctx context.Context, id string) error {
	if id == "" {
		return rental.ErrNotFound
	}
	var res struct {
		Terminated []instance `json:"terminated_instances"`
	}
	err := p.call(ctx, http.MethodPost, "/instance-operations/terminate", map[string][]string{"instance_ids": {id}}, &res)
	var ae *APIError
	switch {
	case errors.As(err, &ae) && ae.notFound():
		return fmt.Errorf("%w: %w", rental.ErrNotFound, err)
	case err != nil:
		return err
	}
	for _, in := range res.Terminated {
		if in.ID == id {
			return nil
		}
	}
	return errors.New("lambda did not list the instance as terminated")
}

// List returns the machines this gateway launched that are not yet
// terminated: those whose name carries a rental id.
func (p *Provider) List(ctx context.Context) ([]rental.Instance, error) {
	var all []instance
	if err := p.call(ctx, http.MethodGet, "/instances", nil, &all); err != nil {
		return nil, fmt.Errorf("lambda instances: %w", err)
	}
	var out []rental.Instance
	for _, in := range all {
		if !strings.HasPrefix(in.Name, namePrefix) || in.Name == namePrefix || in.Status == "terminated" {
			continue
		}
		out = append(out, toInstance(in))
	}
	return out, nil
}
