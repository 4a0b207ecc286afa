package server

import (
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"go.yaml.in/yaml/v3"

	"github.com/svc-dev/svc/internal/bolt"
	"github.com/svc-dev/svc/internal/buildinfo"
	"github.com/svc-dev/svc/internal/fleet"
)

// registeredMetrics is every metric name a server with all its optional
// parts (a cluster, a store writer, the clock watch) registers, read from
// its registry's descriptors so that a vector with no series yet counts.
func registeredMetrics(t *testing.T) map[string]bool {
	t.Helper()
	store, err := bolt.Open(t.TempDir(), bolt.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	log := slog.New(slog.DiscardHandler)
	s := New(Deps{Logger: log, Build: buildinfo.Info{}, Fleet: fleet.New(fleet.Config{Logger: log}),
		Power: NewPowerBook(store.Power(store.NewWriter(bolt.WriterOptions{})), log), Writes: storeOK, Cluster: &Cluster{Lease: leaseAt{}},
		ClockSteps: func() uint64 { return 0 }})
	ch := make(chan *prometheus.Desc)
	go func() { s.metrics.reg.Describe(ch); close(ch) }()
	// A Desc shows its name only in its String form.
	fq := regexp.MustCompile(`fqName: "([^"]+)"`)
	names := map[string]bool{}
	for d := range ch {
		m := fq.FindStringSubmatch(d.String())
		if m == nil {
			t.Fatalf("no name in %s", d)
		}
		names[m[1]] = true
	}
	return names
}

// metricRef finds the names of svc's, the Go runtime's and the process
// collector's metrics in a query or a description.
var metricRef = regexp.MustCompile(`\b(?:svc|go|process)_[a-z0-9_]*[a-z0-9]\b`)

// The dashboard and the alert rules in deploy/ name only metrics svc
// serves, so a renamed metric cannot leave a panel empty or an alert
// silent.
func TestDeployMonitoringNamesRegisteredMetrics(t *testing.T) {
	names := registeredMetrics(t)
	known := func(ref string) bool {
		if names[ref] {
			return true
		}
		// A histogram's or summary's series.
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if base, ok := strings.CutSuffix(ref, suffix); ok && names[base] {
				return true
			}
		}
		return false
	}
	deploy := filepath.Join("..", "..", "deploy")

	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	dashText := readDeploy(t, deploy, "grafana", "svc.json")
	if err := json.Unmarshal(dashText, &dash); err != nil {
		t.Fatalf("grafana/svc.json: %v", err)
	}
	var exprs []string
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			if tg.Expr == "" {
				t.Errorf("grafana/svc.json: panel %q has a target with no expression", p.Title)
			}
			exprs = append(exprs, tg.Expr)
		}
	}

	var rules struct {
		Groups []struct {
			Name  string `yaml:"name"`
			Rules []struct {
				Alert       string            `yaml:"alert"`
				Expr        string            `yaml:"expr"`
				For         string            `yaml:"for"`
				Labels      map[string]string `yaml:"labels"`
				Annotations map[string]string `yaml:"annotations"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	rulesText := readDeploy(t, deploy, "prometheus", "svc-alerts.yaml")
	dec := yaml.NewDecoder(strings.NewReader(string(rulesText)))
	dec.KnownFields(true)
	if err := dec.Decode(&rules); err != nil {
		t.Fatalf("prometheus/svc-alerts.yaml: %v", err)
	}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" || r.Expr == "" || r.Annotations["summary"] == "" {
				t.Errorf("prometheus/svc-alerts.yaml: group %s: a rule without an alert name, expression or summary: %+v", g.Name, r)
			}
			exprs = append(exprs, r.Expr)
		}
	}
	if len(exprs) == 0 {
		t.Fatal("no expressions found in deploy/")
	}
	for _, e := range exprs {
		if len(metricRef.FindAllString(e, -1)) == 0 && !strings.Contains(e, "up{") {
			t.Errorf("%q names no svc metric", e)
		}
	}

	// Every name in either file, descriptions included.
	for file, text := range map[string][]byte{"grafana/svc.json": dashText, "prometheus/svc-alerts.yaml": rulesText} {
		var unknown []string
		for _, ref := range metricRef.FindAllString(string(text), -1) {
			if !known(ref) && !slices.Contains(unknown, ref) {
				unknown = append(unknown, ref)
			}
		}
		if len(unknown) > 0 {
			t.Errorf("%s names metrics svc does not register: %s", file, strings.Join(unknown, ", "))
		}
	}
}

func readDeploy(t *testing.T, parts ...string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(parts...))
	if err != nil {
		t.Fatal(err)
	}
	return b
}
