// Package local is the rental provider that places rentals on the
// gateway's own host: each rental is a real `svc worker` child process,
// on the simulator engine unless configured otherwise. It is the default
// provider, so renting can be tried without a cloud account.
//
// Everything about an instance is in its directory under Config.Dir:
// meta.json (rental, GPU, tier, when), the worker token (0600), the svc
// binary the worker runs, worker.log, the worker's pid once it runs, and
// exit.json once the provider has seen it end. Workers run in a process
// group of their own and outlive the gateway, as a cloud machine would; a
// provider started over the same directory finds them there, watches
// them, and can destroy them.
package local

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/rental"
)

// Name is the provider's name in rentals and placement records.
const Name = "local"

// GPU is a kind of machine the provider offers.
type GPU struct {
	// Offer is what the GPU is offered as; the provider sets Available and
	// Ref.
	rental.Offer
	// Capacity is how many rentals of it can run at once.
	Capacity int
}

// Config configures a Provider.
type Config struct {
	// Exe is the svc binary workers run; the running binary when empty.
	Exe string
	// Dir holds the instances' state, a directory under the gateway's data
	// directory. Required.
	Dir string
	// Engine is the --engine of the workers; "sim" when empty.
	Engine string
	// GPUs is the catalogue offered; DefaultGPUs when empty.
	GPUs []GPU
	// BootStep is the pause between boot phases, so that they show; 700 ms
	// when zero, none when negative.
	BootStep time.Duration
	Logger   *slog.Logger
}

// DefaultBootStep is the pause between boot phases by default.
const DefaultBootStep = 700 * time.Millisecond

// DefaultGPUs is the demo catalogue: three simulated GPUs, labelled as
// such, one in each of three jurisdiction tiers. Every rental of them
// runs on the gateway's host; the location and operator claims are part
// of the simulation, made so that each tier is what rental.TierFor makes
// of them: the L4 claims a UK host run by a UK operator (UK sovereign),
// the A100 a UK host without claiming the operator's domicile (UK), and
// the H100 claims no location at all (global).
func DefaultGPUs() []GPU {
	const operator = "This gateway's host (simulated)"
	return []GPU{
		{Capacity: 2, Offer: rental.Offer{
			GPUModelID: "sim-l4", Label: "Simulated L4 24GB", Vendor: "NVIDIA", Model: "L4", Generation: "Ada Lovelace",
			VRAMGB: 24, GPUCount: 1, RAMGB: 64, TierID: rental.TierUKSovereign,
			Region: "local", Country: "GB", OperatorEntity: operator, OperatorDomicile: "GB",
			PriceMinor: 60, Currency: "GBP",
		}},
		{Capacity: 1, Offer: rental.Offer{
			GPUModelID: "sim-a100", Label: "Simulated A100 80GB", Vendor: "NVIDIA", Model: "A100", Generation: "Ampere",
			VRAMGB: 80, GPUCount: 1, RAMGB: 256, TierID: rental.TierUK,
			Region: "local", Country: "GB", OperatorEntity: operator,
			PriceMinor: 180, Currency: "GBP",
		}},
		{Capacity: 1, Offer: rental.Offer{
			GPUModelID: "sim-h100", Label: "Simulated H100 80GB", Vendor: "NVIDIA", Model: "H100", Generation: "Hopper",
			VRAMGB: 80, GPUCount: 1, TierID: rental.TierGlobal,
			Region: "local", OperatorEntity: operator,
			PriceMinor: 240, Currency: "GBP",
		}},
	}
}

// Provider places rentals on this host. It is safe for concurrent use;
// build it with New and Close it to stop watching its workers (which keep
// running).
type Provider struct {
	cfg Config
	log *slog.Logger
	dir string // Config.Dir, absolute and with symlinks resolved
	exe string

	mu     sync.Mutex
	insts  map[string]*instance // instances booted or watched by this provider
	closed bool
	wg     sync.WaitGroup
}

var _ rental.Provider = (*Provider)(nil)

// instance is an instance the provider booted or adopted.
type instance struct {
	id   string
	dir  string
	meta meta
	// cancel stops its goroutine and done is closed when it has ended.
	cancel context.CancelFunc
	done   chan struct{}

	// Guarded by Provider.mu.
	state, phase, err string
	pid               int
}

func (in *instance) view() rental.Instance {
	return rental.Instance{ID: in.id, RentalID: in.meta.RentalID, State: in.state, BootPhase: in.phase, Error: in.err, Region: in.meta.Region}
}

// New returns a provider over cfg.Dir, watching the workers a previous
// provider left running there.
func New(cfg Config) (*Provider, error) {
	if !supported {
		return nil, errors.New("local rentals need a unix host")
	}
	if cfg.Dir == "" {
		return nil, errors.New("local provider: no directory for instances")
	}
	if cfg.Exe == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("local provider: find the svc binary: %w", err)
		}
		cfg.Exe = exe
	}
	if cfg.Engine == "" {
		cfg.Engine = "sim"
	}
	if len(cfg.GPUs) == 0 {
		cfg.GPUs = DefaultGPUs()
	}
	if cfg.BootStep == 0 {
		cfg.BootStep = DefaultBootStep
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if err := checkGPUs(cfg.GPUs); err != nil {
		return nil, err
	}
	// Resolved, so that a hard link is to the binary, not to a symlink.
	exe, err := filepath.Abs(cfg.Exe)
	if err == nil {
		exe, err = filepath.EvalSymlinks(exe)
	}
	if err != nil {
		return nil, fmt.Errorf("local provider: the svc binary: %w", err)
	}
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("local provider: %w", err)
	}
	// A worker's executable is checked against its path, which the
	// kernel reports resolved.
	dir, err := filepath.Abs(cfg.Dir)
	if err == nil {
		dir, err = filepath.EvalSymlinks(dir)
	}
	if err != nil {
		return nil, fmt.Errorf("local provider: %w", err)
	}
	p := &Provider{cfg: cfg, log: cfg.Logger, dir: dir, exe: exe, insts: map[string]*instance{}}
	if err := p.adopt(); err != nil {
		return nil, err
	}
	return p, nil
}

func checkGPUs(gpus []GPU) error {
	seen := map[[2]string]bool{}
	for _, g := range gpus {
		key := [2]string{g.GPUModelID, g.TierID}
		if g.GPUModelID == "" || g.Capacity < 0 || seen[key] {
			return fmt.Errorf("local provider: GPU %q in tier %q is unnamed, repeated or has a negative capacity", g.GPUModelID, g.TierID)
		}
		if !slices.ContainsFunc(rental.Tiers(), func(t rental.Tier) bool { return t.ID == g.TierID }) {
			return fmt.Errorf("local provider: GPU %q has unknown tier %q", g.GPUModelID, g.TierID)
		}
		seen[key] = true
	}
	return nil
}

// adopt watches the workers of instances found running in the directory.
func (p *Provider) adopt() error {
	ids, err := p.ids()
	if err != nil {
		return err
	}
	for _, id := range ids {
		dir := p.instDir(id)
		m, err := readMeta(dir)
		if err != nil {
			continue
		}
		if resumable(dir, m) {
			p.resume(id, dir, m)
			continue
		}
		d := readDisk(dir)
		if d.state != rental.InstanceRunning {
			continue
		}
		p.log.Info("local rental: watching a worker left running", "instance", id, "rental", m.RentalID, "pid", d.pid)
		p.start(&instance{id: id, dir: dir, meta: m, state: d.state, phase: d.phase, pid: d.pid},
			func(ctx context.Context, in *instance) { p.watch(ctx, in, d.pid) })
	}
	return nil
}

// start makes in the provider's and runs fn for it on a goroutine of its
// own, which Destroy and Close cancel and wait for. The caller holds mu,
// or has the provider to itself.
func (p *Provider) start(in *instance, fn func(context.Context, *instance)) {
	ctx, cancel := context.WithCancel(context.Background())
	in.cancel, in.done = cancel, make(chan struct{})
	p.insts[in.id] = in
	p.wg.Go(func() {
		defer close(in.done)
		defer cancel()
		fn(ctx, in)
	})
}

// resume boots again an instance whose boot a stopped provider cut short,
// once that provider's boot has let go of it: a rental the gateway
// accepted outlives the gateway's restart, as a cloud machine's boot
// would. It is pending meanwhile.
func (p *Provider) resume(id, dir string, m meta) {
	w := rental.WorkerSpec{Gateway: m.Gateway, Name: m.WorkerName, Models: m.Models}
	p.log.Info("local rental: resuming a boot cut short", "instance", id, "rental", m.RentalID)
	p.start(&instance{id: id, dir: dir, meta: m, state: rental.InstancePending, phase: api.BootQueued},
		func(ctx context.Context, in *instance) { p.run(ctx, in, w) })
}

// Name is "local".
func (p *Provider) Name() string { return Name }

// Offers lists the catalogue, each GPU available while fewer than its
// capacity of rentals are booting or running.
func (p *Provider) Offers(ctx context.Context) ([]rental.Offer, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("local offers: %w", err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	busy, err := p.busyLocked()
	if err != nil {
		return nil, err
	}
	out := make([]rental.Offer, 0, len(p.cfg.GPUs))
	for _, g := range p.cfg.GPUs {
		o := g.Offer
		o.Ref = g.GPUModelID
		o.Available = busy[[2]string{g.GPUModelID, g.TierID}] < g.Capacity
		out = append(out, o)
	}
	return out, nil
}

// busyLocked counts the booting and running instances of each GPU and
// tier.
func (p *Provider) busyLocked() (map[[2]string]int, error) {
	ids, err := p.ids()
	if err != nil {
		return nil, err
	}
	busy := map[[2]string]int{}
	for _, id := range ids {
		m, inst, err := p.viewLocked(id)
		if err != nil {
			continue
		}
		if inst.State == rental.InstancePending || inst.State == rental.InstanceRunning {
			busy[[2]string{m.GPUModelID, m.TierID}]++
		}
	}
	return busy, nil
}

// Create makes the instance's directory and boots its worker in the
// background: Status follows the boot phases.
func (p *Provider) Create(ctx context.Context, l rental.Launch) (rental.Instance, error) {
	if err := ctx.Err(); err != nil {
		return rental.Instance{}, fmt.Errorf("local create: %w", err)
	}
	i := slices.IndexFunc(p.cfg.GPUs, func(g GPU) bool { return g.GPUModelID == l.Offer.GPUModelID && g.TierID == l.Offer.TierID })
	if i < 0 {
		return rental.Instance{}, fmt.Errorf("local create: no GPU %q in tier %q here", l.Offer.GPUModelID, l.Offer.TierID)
	}
	gpu := p.cfg.GPUs[i]
	if l.RentalID == "" || l.Worker.Token == "" {
		return rental.Instance{}, errors.New("local create: a launch needs a rental id and a worker token")
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return rental.Instance{}, errors.New("local create: the provider is closed")
	}
	busy, err := p.busyLocked()
	if err != nil {
		return rental.Instance{}, err
	}
	if busy[[2]string{gpu.GPUModelID, gpu.TierID}] >= gpu.Capacity {
		return rental.Instance{}, rental.ErrNoCapacity
	}
	id, err := newID()
	if err != nil {
		return rental.Instance{}, fmt.Errorf("local create: %w", err)
	}
	now := time.Now().UTC()
	m := meta{RentalID: l.RentalID, GPUModelID: gpu.GPUModelID, TierID: gpu.TierID, Region: gpu.Region,
		WorkerName: l.Worker.Name, Created: now, Gateway: l.Worker.Gateway, Models: l.Worker.Models}
	if l.Worker.MaxRuntime > 0 {
		end := now.Add(l.Worker.MaxRuntime)
		m.Deadline = &end
	}
	dir := p.instDir(id)
	if err := makeInstanceDir(dir, l.Worker.Token, m); err != nil {
		_ = os.RemoveAll(dir)
		return rental.Instance{}, fmt.Errorf("local create: %w", err)
	}
	in := &instance{id: id, dir: dir, meta: m, state: rental.InstancePending, phase: api.BootQueued}
	p.log.Info("local rental: created", "instance", id, "rental", l.RentalID, "gpu", gpu.GPUModelID, "tier", gpu.TierID)
	w := l.Worker
	p.start(in, func(ctx context.Context, in *instance) { p.run(ctx, in, w) })
	return in.view(), nil
}

// Status reports an instance: from memory when this provider booted or
// watches it, else from its directory. An instance whose boot another
// provider cut short is resumed here, as at a start over the directory:
// only a rental's home asks after its machine, and a home that asks about
// a boot it did not start has taken the rental over from one that
// stopped (a cluster's replica that died), whose boot a cloud machine
// would have carried on alone. A boot of a provider still going is waited
// out (run).
func (p *Provider) Status(ctx context.Context, id string) (rental.Instance, error) {
	if err := ctx.Err(); err != nil {
		return rental.Instance{}, fmt.Errorf("local status: %w", err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	m, inst, err := p.viewLocked(id)
	if dir := p.instDir(id); err == nil && p.insts[id] == nil && !p.closed && resumable(dir, m) {
		p.resume(id, dir, m)
		inst = p.insts[id].view()
	}
	return inst, err
}

// viewLocked is an instance as it is now; ErrNotFound once its directory
// is gone (or was never one of ours).
func (p *Provider) viewLocked(id string) (meta, rental.Instance, error) {
	if !validID(id) {
		return meta{}, rental.Instance{}, rental.ErrNotFound
	}
	dir := p.instDir(id)
	if _, err := os.Stat(dir); err != nil {
		return meta{}, rental.Instance{}, rental.ErrNotFound
	}
	if in := p.insts[id]; in != nil {
		return in.meta, in.view(), nil
	}
	m, err := readMeta(dir)
	if err != nil {
		return meta{}, rental.Instance{}, rental.ErrNotFound
	}
	d := readDisk(dir)
	return m, rental.Instance{ID: id, RentalID: m.RentalID, State: d.state, BootPhase: d.phase, Error: d.err, Region: m.Region}, nil
}

// List returns every instance in the directory, alive or not.
func (p *Provider) List(ctx context.Context) ([]rental.Instance, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("local list: %w", err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	ids, err := p.ids()
	if err != nil {
		return nil, err
	}
	var out []rental.Instance
	for _, id := range ids {
		if _, inst, err := p.viewLocked(id); err == nil {
			out = append(out, inst)
		}
	}
	return out, nil
}

// Destroy stops an instance's boot or watch, ends its worker's process
// group (SIGTERM, then SIGKILL), and removes its directory. It returns
// nil once the worker is gone, also when there was no such instance.
func (p *Provider) Destroy(ctx context.Context, id string) error {
	if !validID(id) {
		return nil
	}
	p.mu.Lock()
	in := p.insts[id]
	p.mu.Unlock()
	if in != nil {
		in.cancel()
		select {
		case <-in.done:
		case <-ctx.Done():
			return fmt.Errorf("destroy %s: %w", id, ctx.Err())
		}
	}
	dir := p.instDir(id)
	pid := readPid(dir)
	if in != nil {
		p.mu.Lock()
		if in.pid != 0 {
			pid = in.pid
		}
		p.mu.Unlock()
	}
	if pid > 0 {
		if err := terminate(ctx, pid, filepath.Join(dir, binFile)); err != nil {
			return fmt.Errorf("destroy %s: %w", id, err)
		}
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("destroy %s: %w", id, err)
	}
	p.mu.Lock()
	delete(p.insts, id)
	p.mu.Unlock()
	p.log.Info("local rental: destroyed", "instance", id, "pid", pid)
	return nil
}

// Close stops the boots in progress and the watching of workers, and
// waits for them. The workers keep running, for a provider over the same
// directory to find; an interrupted boot is resumed by it.
func (p *Provider) Close() error {
	p.mu.Lock()
	p.closed = true
	for _, in := range p.insts {
		in.cancel()
	}
	p.mu.Unlock()
	p.wg.Wait()
	return nil
}

// ids are the names of the instance directories.
func (p *Provider) ids() ([]string, error) {
	entries, err := os.ReadDir(p.dir)
	if err != nil {
		return nil, fmt.Errorf("local provider: %w", err)
	}
	var out []string
	for _, e := range entries {
		if e.IsDir() && validID(e.Name()) {
			out = append(out, e.Name())
		}
	}
	return out, nil
}

func (p *Provider) instDir(id string) string { return filepath.Join(p.dir, id) }

const idPrefix = "loc-"

func newID() (string, error) {
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return idPrefix + hex.EncodeToString(b), nil
}

// validID keeps ids to what newID makes, so that no id names a path
// outside the directory.
func validID(id string) bool {
	if len(id) <= len(idPrefix) || id[:len(idPrefix)] != idPrefix {
		return false
	}
	for _, r := range id[len(idPrefix):] {
		if !(r >= '0' && r <= '9' || r >= 'a' && r <= 'f') {
			return false
		}
	}
	return true
}
