package lambda

import (
	"context"
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/rental"
	"github.com/svc-dev/svc/internal/rental/lambda/lambdatest"
)

func newProvider(t *testing.T, srv *lambdatest.Server, edit ...func(*Config)) *Provider {
	t.Helper()
	cfg := Config{BaseURL: srv.BaseURL(), APIKey: srv.Key(), SSHKeyName: "svc-test", Poll: 5 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))}
	for _, e := range edit {
		e(&cfg)
	}
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return ctx
}

// offer finds the offer of an instance type in a region.
func offer(t *testing.T, offers []rental.Offer, ref, region string) rental.Offer {
	t.Helper()
	for _, o := range offers {
		if o.Ref == ref && o.Region == region {
			return o
		}
	}
	t.Fatalf("no offer of %s in %q among %d offers", ref, region, len(offers))
	return rental.Offer{}
}

func launchOf(rentalID string, o rental.Offer) rental.Launch {
	l := rental.Launch{RentalID: rentalID, Offer: o,
		Worker: rental.WorkerSpec{Gateway: "https://gw.example", Token: "svc_wt_secret", Name: "rented-" + rentalID}}
	l.BootScript = rental.BootScript(l, rental.BootOptions{WorkerURL: "https://example.com/svc-linux-amd64"})
	return l
}

// place launches a rental on the first H100 PCIe offer with capacity.
func place(t *testing.T, p *Provider, rentalID string) (rental.Instance, rental.Launch) {
	t.Helper()
	offers, err := p.Offers(ctxFor(t, 5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	l := launchOf(rentalID, offer(t, offers, "gpu_1x_h100_pcie", "us-east-1"))
	inst, err := p.Create(ctxFor(t, 5*time.Second), l)
	if err != nil {
		t.Fatal(err)
	}
	return inst, l
}

func TestNew(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		cfg  Config
	}{
		{"no key", Config{}},
		{"blank key", Config{APIKey: "  "}},
		{"relative base URL", Config{APIKey: "k", BaseURL: "cloud.lambda.ai/api/v1"}},
	} {
		if _, err := New(tc.cfg); err == nil {
			t.Errorf("%s: New succeeded", tc.name)
		}
	}
}

func TestOffers(t *testing.T) {
	t.Parallel()
	types := append(lambdatest.DefaultTypes(),
		lambdatest.InstanceType{Name: "cpu_4x_general", Description: "4x vCPU", GPUDescription: "", PriceCentsPerHour: 20, VCPUs: 4, MemoryGiB: 16, StorageGiB: 100},
		lambdatest.InstanceType{Name: "gpu_1x_mi300x", Description: "1x MI300X (192 GB)", GPUDescription: "MI300X (192 GB)", PriceCentsPerHour: 300, VCPUs: 20, MemoryGiB: 240, StorageGiB: 1000, GPUs: 1},
	)
	srv := lambdatest.NewServer(t, lambdatest.WithTypes(types...),
		lambdatest.WithCapacity("gpu_1x_h100_pcie", "us-east-1", 2),
		lambdatest.WithCapacity("gpu_1x_h100_pcie", "europe-central-1", 1),
		lambdatest.WithCapacity("gpu_8x_h100_sxm5", "asia-northeast-1", 1),
		lambdatest.WithCapacity("gpu_1x_gh200", "us-east-1", 1),
		lambdatest.WithCapacity("cpu_4x_general", "us-east-1", 1),
	)
	p := newProvider(t, srv)
	offers, err := p.Offers(ctxFor(t, 5*time.Second))
	if err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		ref, region           string
		id, label, model, gen string
		vram, ram             float64
		count                 int
		country, tier         string
		price                 int64
		available             bool
	}{
		{"gpu_1x_h100_pcie", "us-east-1", "h100-80gb", "H100 80GB", "H100", "Hopper", 80, 200, 1, "US", rental.TierGlobal, 249, true},
		{"gpu_1x_h100_pcie", "europe-central-1", "h100-80gb", "H100 80GB", "H100", "Hopper", 80, 200, 1, "DE", rental.TierAdequacy, 249, true},
		{"gpu_8x_h100_sxm5", "asia-northeast-1", "h100-80gb-x8", "8x H100 80GB", "H100", "Hopper", 80, 1800, 8, "JP", rental.TierAdequacy, 2392, true},
		{"gpu_1x_h100_sxm5", "", "h100-80gb", "H100 80GB", "H100", "Hopper", 80, 225, 1, "", rental.TierGlobal, 329, false},
		{"gpu_1x_a100", "", "a100-40gb", "A100 40GB", "A100", "Ampere", 40, 200, 1, "", rental.TierGlobal, 129, false},
		{"gpu_8x_a100_80gb_sxm4", "", "a100-80gb-x8", "8x A100 80GB", "A100", "Ampere", 80, 1800, 8, "", rental.TierGlobal, 1432, false},
		{"gpu_1x_a10", "", "a10-24gb", "A10 24GB", "A10", "Ampere", 24, 200, 1, "", rental.TierGlobal, 75, false},
		{"gpu_1x_a6000", "", "rtx-a6000-48gb", "RTX A6000 48GB", "RTX A6000", "Ampere", 48, 100, 1, "", rental.TierGlobal, 80, false},
		{"gpu_1x_b200_sxm6", "", "b200-180gb", "B200 180GB", "B200", "Blackwell", 180, 360, 1, "", rental.TierGlobal, 499, false},
		{"gpu_1x_rtx6000", "", "rtx-6000-24gb", "RTX 6000 24GB", "Quadro RTX 6000", "Turing", 24, 46, 1, "", rental.TierGlobal, 50, false},
		{"gpu_8x_v100_n", "", "v100-16gb-x8", "8x V100 16GB", "Tesla V100", "Volta", 16, 448, 8, "", rental.TierGlobal, 440, false},
	} {
		o := offer(t, offers, tc.ref, tc.region)
		want := rental.Offer{GPUModelID: tc.id, Label: tc.label, Vendor: "NVIDIA", Model: tc.model, Generation: tc.gen,
			VRAMGB: tc.vram, GPUCount: tc.count, RAMGB: tc.ram, TierID: tc.tier, Region: tc.region, Country: tc.country,
			OperatorEntity: "Lambda, Inc.", OperatorDomicile: "US", PriceMinor: tc.price, Currency: "USD",
			Available: tc.available, Ref: tc.ref}
		if o != want {
			t.Errorf("%s in %q:\n got %+v\nwant %+v", tc.ref, tc.region, o, want)
		}
	}
	for _, o := range offers {
		switch o.Ref {
		case "gpu_1x_gh200", "cpu_4x_general", "gpu_1x_mi300x":
			t.Errorf("offered %s in %q; it should be skipped", o.Ref, o.Region)
		}
	}
	// 11 known amd64 types, one of them in two regions.
	if len(offers) != 12 {
		t.Errorf("%d offers, want 12", len(offers))
	}

	// A region that had capacity stays listed, unavailable, once it has none.
	srv.SetCapacity("gpu_1x_h100_pcie", "europe-central-1", 0)
	offers, err = p.Offers(ctxFor(t, 5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if o := offer(t, offers, "gpu_1x_h100_pcie", "europe-central-1"); o.Available || o.TierID != rental.TierAdequacy {
		t.Errorf("europe-central-1 without capacity: %+v", o)
	}
	if o := offer(t, offers, "gpu_1x_h100_pcie", "us-east-1"); !o.Available {
		t.Errorf("us-east-1 with capacity is unavailable")
	}
}

func TestMachineFor(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, desc string
		gpus       int
		ok         bool
		id         string
		count      int
		vram       float64
		arm64      bool
	}{
		{"gpu_1x_h100_pcie", "H100 (80 GB PCIe)", 1, true, "h100-80gb", 1, 80, false},
		{"gpu_8x_h100_sxm5gdr", "H100 (80 GB SXM5)", 8, true, "h100-80gb-x8", 8, 80, false},
		{"gpu_2x_h100_sxm5", "", 0, true, "h100-80gb-x2", 2, 80, false},
		{"gpu_1x_a100", "A100 (40 GB PCIe)", 1, true, "a100-40gb", 1, 40, false},
		{"gpu_1x_a100_sxm4", "A100 (80 GB SXM4)", 1, true, "a100-80gb", 1, 80, false},
		{"gpu_8x_a100_80gb_sxm4", "", 8, true, "a100-80gb-x8", 8, 80, false},
		{"gpu_4x_a100_pcie", "A100 (40 GB PCIe)", 4, true, "a100-40gb-x4", 4, 40, false},
		{"gpu_1x_a10", "A10 (24 GB PCIe)", 1, true, "a10-24gb", 1, 24, false},
		{"gpu_4x_a6000", "A6000 (48 GB)", 4, true, "rtx-a6000-48gb-x4", 4, 48, false},
		{"gpu_1x_gh200", "GH200 (96 GB)", 1, true, "gh200-96gb", 1, 96, true},
		{"gpu_8x_b200_sxm6", "B200 (180 GB SXM6)", 8, true, "b200-180gb-x8", 8, 180, false},
		{"gpu_1x_rtx6000", "RTX 6000 (24 GB)", 1, true, "rtx-6000-24gb", 1, 24, false},
		{"gpu_8x_v100", "Tesla V100 (16 GB)", 8, true, "v100-16gb-x8", 8, 16, false},
		// The API's count wins over the name's.
		{"gpu_1x_h100_sxm5", "H100 (80 GB SXM5)", 2, true, "h100-80gb-x2", 2, 80, false},
		{"gpu_1x_rtx6000ada", "RTX 6000 Ada (48 GB)", 1, false, "", 0, 0, false},
		{"gpu_1x_mi300x", "MI300X (192 GB)", 1, false, "", 0, 0, false},
		{"cpu_4x_general", "", 0, false, "", 0, 0, false},
		{"gpu_0x_h100", "", 0, false, "", 0, 0, false},
		{"h100", "", 1, false, "", 0, 0, false},
	} {
		m, ok := machineFor(tc.name, tc.desc, tc.gpus)
		if ok != tc.ok {
			t.Errorf("%s: ok = %v, want %v", tc.name, ok, tc.ok)
			continue
		}
		if ok && (m.id() != tc.id || m.count != tc.count || m.vramGB != tc.vram || m.arm64 != tc.arm64) {
			t.Errorf("%s: got %s ×%d %v GB arm64=%v, want %s ×%d %v GB arm64=%v", tc.name,
				m.id(), m.count, m.vramGB, m.arm64, tc.id, tc.count, tc.vram, tc.arm64)
		}
	}
}

func TestCountryOf(t *testing.T) {
	t.Parallel()
	for region, want := range map[string]string{
		"us-east-1": "US", "us-west-3": "US", "us-south-2": "US", "us-midwest-1": "US", "us-east-3": "US",
		"europe-central-1": "DE", "asia-south-1": "IN", "me-west-1": "IL",
		"asia-northeast-1": "JP", "asia-northeast-2": "JP", "australia-east-1": "AU",
		"test-east-1": "", "mars-north-1": "", "": "",
	} {
		if got := countryOf(region); got != want {
			t.Errorf("countryOf(%q) = %q, want %q", region, got, want)
		}
	}
}

func TestCreate(t *testing.T) {
	t.Parallel()
	srv := lambdatest.NewServer(t, lambdatest.WithCapacity("gpu_1x_h100_pcie", "us-east-1", 2))
	p := newProvider(t, srv)
	inst, l := place(t, p, "3f0c2a1e-0000-4000-8000-000000000001")

	want := rental.Instance{ID: inst.ID, RentalID: l.RentalID, State: rental.InstancePending,
		BootPhase: api.BootAllocating, Region: "us-east-1"}
	if inst.ID == "" || inst != want {
		t.Errorf("Create = %+v, want %+v", inst, want)
	}
	launches := srv.Launches()
	if len(launches) != 1 {
		t.Fatalf("%d launches, want 1", len(launches))
	}
	got := launches[0]
	if got.Name != "svc-"+l.RentalID || got.RegionName != "us-east-1" || got.InstanceTypeName != "gpu_1x_h100_pcie" ||
		len(got.SSHKeyNames) != 1 || got.SSHKeyNames[0] != "svc-test" || got.Quantity == nil || *got.Quantity != 1 {
		t.Errorf("launch request %+v", got)
	}
	if srv.UserData(inst.ID) != l.BootScript || !strings.Contains(l.BootScript, "svc_wt_secret") {
		t.Errorf("the boot script did not go through as user data:\n%s", srv.UserData(inst.ID))
	}
	if n := srv.Capacity("gpu_1x_h100_pcie", "us-east-1"); n != 1 {
		t.Errorf("capacity left %d, want 1", n)
	}
}

func TestCreateSSHKey(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		configured string
		account    []string
		want       string // "" for an error
	}{
		{"configured", "svc-test", []string{"other", "svc-test"}, "svc-test"},
		{"account's first", "", []string{"first", "second"}, "first"},
		{"none", "", nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := lambdatest.NewServer(t, lambdatest.WithSSHKeys(tc.account...),
				lambdatest.WithCapacity("gpu_1x_a10", "us-west-1", 1))
			p := newProvider(t, srv, func(c *Config) { c.SSHKeyName = tc.configured })
			offers, err := p.Offers(ctxFor(t, 5*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			_, err = p.Create(ctxFor(t, 5*time.Second), launchOf("r1", offer(t, offers, "gpu_1x_a10", "us-west-1")))
			if tc.want == "" {
				if err == nil || !strings.Contains(err.Error(), "no SSH key") || len(srv.Launches()) != 0 {
					t.Errorf("err = %v after %d launches; want a clear error and none", err, len(srv.Launches()))
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := srv.Launches()[0].SSHKeyNames; len(got) != 1 || got[0] != tc.want {
				t.Errorf("launched with keys %v, want [%s]", got, tc.want)
			}
		})
	}
}

func TestCreateNoCapacity(t *testing.T) {
	t.Parallel()
	srv := lambdatest.NewServer(t, lambdatest.WithCapacity("gpu_1x_h100_pcie", "us-east-1", 1))
	p := newProvider(t, srv)
	offers, err := p.Offers(ctxFor(t, 5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	o := offer(t, offers, "gpu_1x_h100_pcie", "us-east-1")
	if _, err := p.Create(ctxFor(t, 5*time.Second), launchOf("r1", o)); err != nil {
		t.Fatal(err)
	}
	// The offer still says available: the catalogue is a cache, and
	// capacity goes between a look and a launch.
	_, err = p.Create(ctxFor(t, 5*time.Second), launchOf("r2", o))
	if !errors.Is(err, rental.ErrNoCapacity) || !strings.Contains(err.Error(), "Not enough capacity") {
		t.Errorf("second launch: err = %v, want ErrNoCapacity with Lambda's message", err)
	}

	// A type never seen with capacity has no region to launch in.
	none := offer(t, offers, "gpu_1x_a10", "")
	before := len(srv.Launches())
	if _, err := p.Create(ctxFor(t, 5*time.Second), launchOf("r3", none)); !errors.Is(err, rental.ErrNoCapacity) {
		t.Errorf("region-less offer: err = %v, want ErrNoCapacity", err)
	}
	if len(srv.Launches()) != before {
		t.Errorf("a region-less offer was sent to Lambda")
	}
}

func TestCreateAdoptsALostLaunch(t *testing.T) {
	t.Parallel()
	srv := lambdatest.NewServer(t, lambdatest.WithCapacity("gpu_1x_h100_pcie", "us-east-1", 2))
	srv.LoseLaunchAnswers(1)
	p := newProvider(t, srv)
	inst, l := place(t, p, "r-lost")
	if inst.RentalID != l.RentalID || inst.ID == "" {
		t.Fatalf("Create = %+v", inst)
	}
	if _, ok := srv.Status(inst.ID); !ok || len(srv.Launches()) != 1 {
		t.Errorf("adopted %s after %d launches; want the one launched", inst.ID, len(srv.Launches()))
	}
}

func TestStatusBootPhases(t *testing.T) {
	t.Parallel()
	srv := lambdatest.NewServer(t, lambdatest.WithCapacity("gpu_1x_h100_pcie", "us-east-1", 1), lambdatest.WithBootPolls(2))
	p := newProvider(t, srv)
	inst, l := place(t, p, "r-boot")

	for i, want := range []rental.Instance{
		{State: rental.InstancePending, BootPhase: api.BootPullingImage},
		{State: rental.InstancePending, BootPhase: api.BootPullingImage},
		{State: rental.InstanceRunning, BootPhase: api.BootRuntimeReady},
		{State: rental.InstanceRunning, Error: "unhealthy"},
		{State: rental.InstanceTerminated},
	} {
		switch i {
		case 3:
			srv.SetStatus(inst.ID, lambdatest.StatusUnhealthy)
		case 4:
			srv.SetStatus(inst.ID, lambdatest.StatusTerminating)
		}
		want.ID, want.RentalID, want.Region = inst.ID, l.RentalID, "us-east-1"
		got, err := p.Status(ctxFor(t, 5*time.Second), inst.ID)
		if err != nil {
			t.Fatalf("poll %d: %v", i, err)
		}
		if got != want {
			t.Errorf("poll %d: %+v, want %+v", i, got, want)
		}
	}
}

func TestDestroyFailsOnceThenConfirms(t *testing.T) {
	t.Parallel()
	srv := lambdatest.NewServer(t, lambdatest.WithCapacity("gpu_1x_h100_pcie", "us-east-1", 1))
	p := newProvider(t, srv)
	inst, _ := place(t, p, "r-destroy")
	srv.FailTerminateOnce(inst.ID)

	if err := p.Destroy(ctxFor(t, 5*time.Second), inst.ID); err != nil {
		t.Fatalf("Destroy: %v", err)
	}
	if n := srv.Calls("POST /instance-operations/terminate"); n != 2 {
		t.Errorf("%d terminate calls, want 2 (one failed, one taken)", n)
	}
	if st, ok := srv.Status(inst.ID); ok && st != lambdatest.StatusTerminated {
		t.Errorf("after Destroy the instance is %s", st)
	}
	if n := srv.Capacity("gpu_1x_h100_pcie", "us-east-1"); n != 1 {
		t.Errorf("capacity %d after terminate, want 1", n)
	}
	// Once gone, the machine is not found; destroying it again is done.
	if _, err := p.Status(ctxFor(t, 5*time.Second), inst.ID); err != nil && !errors.Is(err, rental.ErrNotFound) {
		t.Errorf("Status after Destroy: %v", err)
	}
	if err := p.Destroy(ctxFor(t, 5*time.Second), inst.ID); err != nil {
		t.Errorf("second Destroy: %v", err)
	}
}

func TestDestroyUnconfirmedWithinContext(t *testing.T) {
	t.Parallel()
	srv := lambdatest.NewServer(t, lambdatest.WithCapacity("gpu_1x_h100_pcie", "us-east-1", 1))
	p := newProvider(t, srv)
	inst, _ := place(t, p, "r-stuck")
	srv.FailTerminate(inst.ID, 1_000_000)

	err := p.Destroy(ctxFor(t, 150*time.Millisecond), inst.ID)
	if err == nil || !strings.Contains(err.Error(), "not confirmed") {
		t.Fatalf("Destroy = %v, want an unconfirmed error", err)
	}
	if n := srv.Calls("POST /instance-operations/terminate"); n < 2 {
		t.Errorf("%d terminate calls; a failed terminate should be retried", n)
	}
	if st, ok := srv.Status(inst.ID); !ok || st == lambdatest.StatusTerminating || st == lambdatest.StatusTerminated {
		t.Errorf("instance %s (known %v); it should still be up", st, ok)
	}
}

func TestNotFound(t *testing.T) {
	t.Parallel()
	srv := lambdatest.NewServer(t)
	p := newProvider(t, srv)
	for _, id := range []string{"0920582c7ff041399e34823a0be62549", "", "../ssh-keys"} {
		if _, err := p.Status(ctxFor(t, 5*time.Second), id); !errors.Is(err, rental.ErrNotFound) {
			t.Errorf("Status(%q) = %v, want ErrNotFound", id, err)
		}
		if err := p.Destroy(ctxFor(t, 5*time.Second), id); err != nil {
			t.Errorf("Destroy(%q) = %v, want nil (no such machine)", id, err)
		}
	}
}

func TestList(t *testing.T) {
	t.Parallel()
	srv := lambdatest.NewServer(t, lambdatest.WithCapacity("gpu_1x_h100_pcie", "us-east-1", 3))
	p := newProvider(t, srv)
	a, _ := place(t, p, "rental-a")
	b, _ := place(t, p, "rental-b")
	srv.AddInstance("training-node-1", "gpu_1x_a10", "us-west-1", lambdatest.StatusActive)
	srv.AddInstance("svc-rental-old", "gpu_1x_a10", "us-west-1", lambdatest.StatusTerminated)
	srv.AddInstance("svc-", "gpu_1x_a10", "us-west-1", lambdatest.StatusActive)

	list, err := p.List(ctxFor(t, 5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, in := range list {
		got[in.ID] = in.RentalID
	}
	want := map[string]string{a.ID: "rental-a", b.ID: "rental-b"}
	if len(got) != len(want) || got[a.ID] != want[a.ID] || got[b.ID] != want[b.ID] {
		t.Errorf("List = %v, want %v", got, want)
	}

	if err := p.Destroy(ctxFor(t, 5*time.Second), a.ID); err != nil {
		t.Fatal(err)
	}
	list, err = p.List(ctxFor(t, 5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].ID != b.ID {
		t.Errorf("List after destroying %s = %+v", a.ID, list)
	}
}

func TestBadKey(t *testing.T) {
	t.Parallel()
	srv := lambdatest.NewServer(t, lambdatest.WithCapacity("gpu_1x_h100_pcie", "us-east-1", 1))
	good := newProvider(t, srv)
	inst, l := place(t, good, "r-key")
	bad := newProvider(t, srv, func(c *Config) { c.APIKey = "not-the-key" })

	for name, call := range map[string]func(context.Context) error{
		"offers":  func(ctx context.Context) error { _, err := bad.Offers(ctx); return err },
		"create":  func(ctx context.Context) error { _, err := bad.Create(ctx, l); return err },
		"status":  func(ctx context.Context) error { _, err := bad.Status(ctx, inst.ID); return err },
		"list":    func(ctx context.Context) error { _, err := bad.List(ctx); return err },
		"destroy": func(ctx context.Context) error { return bad.Destroy(ctx, inst.ID) },
	} {
		start := time.Now()
		err := call(ctxFor(t, 5*time.Second))
		if !errors.Is(err, ErrUnauthorized) || !strings.Contains(err.Error(), "global/invalid-api-key") {
			t.Errorf("%s: err = %v, want ErrUnauthorized with Lambda's code", name, err)
		}
		if errors.Is(err, rental.ErrNotFound) || errors.Is(err, rental.ErrNoCapacity) {
			t.Errorf("%s: a refused key reads as %v", name, err)
		}
		if d := time.Since(start); d > time.Second {
			t.Errorf("%s: took %v; a refused key is not worth retrying", name, d)
		}
	}
	if st, ok := srv.Status(inst.ID); !ok || st == lambdatest.StatusTerminating {
		t.Errorf("the bad key terminated the machine")
	}
}

func TestRateLimited(t *testing.T) {
	t.Parallel()
	srv := lambdatest.NewServer(t, lambdatest.WithCapacity("gpu_1x_h100_pcie", "us-east-1", 1))
	p := newProvider(t, srv)
	srv.RateLimit(3)
	if _, err := p.Offers(ctxFor(t, 5*time.Second)); err != nil {
		t.Fatalf("Offers after three 429s: %v", err)
	}
	srv.RateLimit(2)
	inst, _ := place(t, p, "r-limited")
	if len(srv.Launches()) != 1 || inst.ID == "" {
		t.Errorf("a rate-limited launch made %d launches", len(srv.Launches()))
	}

	// A limit that outlasts the context fails the call.
	srv.RateLimit(1_000_000)
	if _, err := p.Offers(ctxFor(t, 50*time.Millisecond)); err == nil {
		t.Errorf("Offers succeeded though always rate limited")
	}
}

func TestLoadAPIKey(t *testing.T) {
	for _, tc := range []struct {
		name    string
		env     string
		file    string // "" for none
		mode    os.FileMode
		want    string
		wantErr string
	}{
		{"env", " key-from-env\n", "", 0, "key-from-env", ""},
		{"env over a loose file", "key-from-env", "file-key", 0o644, "key-from-env", ""},
		{"file 0600", "", "file-key\n", 0o600, "file-key", ""},
		{"file 0400", "", "file-key", 0o400, "file-key", ""},
		{"file 0644", "", "file-key", 0o644, "", "0644"},
		{"file 0640", "", "file-key", 0o640, "", "0640"},
		{"empty file", "", " \n", 0o600, "", "empty"},
		{"nothing", "", "", 0, "", "LAMBDA_API_KEY"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(KeyEnv, tc.env)
			dir := t.TempDir()
			if tc.file != "" {
				path := filepath.Join(dir, KeyFile)
				if err := os.WriteFile(path, []byte(tc.file), 0o600); err != nil {
					t.Fatal(err)
				}
				if err := os.Chmod(path, tc.mode); err != nil {
					t.Fatal(err)
				}
			}
			got, err := LoadAPIKey(dir)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("LoadAPIKey = %q, %v; want an error mentioning %q", got, err, tc.wantErr)
				}
				if tc.file == "" && !errors.Is(err, fs.ErrNotExist) {
					t.Errorf("a missing file: %v is not fs.ErrNotExist", err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Errorf("LoadAPIKey = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}
