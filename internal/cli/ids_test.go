package cli

import (
	"strings"
	"testing"
)

func TestAbbrevFor(t *testing.T) {
	tests := []struct {
		name string
		ids  []string
		want int
	}{
		{"none", nil, shortIDMin},
		{"apart at eight", []string{"1a2b3c4d-0000", "1a2b3c4e-0000"}, 8},
		{"alike for ten", []string{"1a2b3c4d5e-01", "1a2b3c4d5f-02", "ffff"}, 10},
		{"short ids whole", []string{"wk_a", "wk_b"}, 8},
		{"the same id twice", []string{"1a2b3c4d5e", "1a2b3c4d5e"}, 10},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := abbrevFor(tt.ids, func(s string) string { return s }); int(got) != tt.want {
				t.Errorf("abbrevFor(%q) = %d, want %d", tt.ids, got, tt.want)
			}
		})
	}
	if got := idAbbrev(8).of("wk_a"); got != "wk_a" {
		t.Errorf("a short id is cut: %q", got)
	}
}

func TestPick(t *testing.T) {
	type item struct{ id, name string }
	items := []item{
		{"1a2b3c4d-aaaa", "alpha"},
		{"1a2b9f00-bbbb", "beta"},
		{"77ee0000-cccc", "twin"},
		{"88ff0000-dddd", "twin"},
		{"cafe0000-eeee", "1a2b3c"}, // a name that is also the start of an id
	}
	tests := []struct {
		name, arg string
		want      string // the id found; "" for none
		usage     string // part of the usage error
	}{
		{"id", "1a2b9f00-bbbb", "1a2b9f00-bbbb", ""},
		{"name", "alpha", "1a2b3c4d-aaaa", ""},
		{"unique start", "77ee", "77ee0000-cccc", ""},
		{"unique start, upper case", "77EE00", "77ee0000-cccc", ""},
		{"a name wins over a start", "1a2b3c", "cafe0000-eeee", ""},
		{"two starts", "1a2b", "", `"1a2b" starts 2 thing ids (1a2b3c4d, 1a2b9f00)`},
		{"two names", "twin", "", `2 things are named "twin" (77ee0000, 88ff0000): give an id instead`},
		{"too short to be a start", "77e", "", `"77e" is too short to pick a thing by: give at least 4 characters`},
		{"short, and the start of none", "99", "", ""},
		{"nothing", "gamma", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok, err := pick(items, tt.arg, "thing", func(i item) string { return i.id }, func(i item) string { return i.name })
			switch {
			case tt.usage != "":
				if err == nil || exitCode(err) != exitUsage || !strings.Contains(err.Error(), tt.usage) {
					t.Fatalf("pick(%q) = %v, %v; want a usage error %q", tt.arg, got, err, tt.usage)
				}
			case err != nil || ok != (tt.want != "") || got.id != tt.want:
				t.Fatalf("pick(%q) = %v, %v, %v; want %q", tt.arg, got, ok, err, tt.want)
			}
		})
	}
}

func TestSummarise(t *testing.T) {
	models := []string{"sim-chat", "sim-reasoner", "guard-b:0.6b", "sim-embed"}
	tests := []struct {
		name  string
		items []string
		w     int
		want  string
	}{
		{"none", nil, 40, "-"},
		{"all fit", models, 60, "sim-chat, sim-reasoner, guard-b:0.6b, sim-embed"},
		{"all fit exactly", models, 47, "sim-chat, sim-reasoner, guard-b:0.6b, sim-embed"},
		{"two and a count", models, 40, "sim-chat, sim-reasoner +2 more"},
		{"one and a count", models, 20, "sim-chat +3 more"},
		{"a count alone", models, 12, "4 models"},
		{"one item cut", []string{"llama-3.3-70b-instruct"}, 12, "llama-3.3-7…"},
		{"nothing fits whole", models, 5, "sim-…"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := summarise(tt.items, "models", tt.w); got != tt.want {
				t.Errorf("summarise(%d) = %q, want %q", tt.w, got, tt.want)
			}
		})
	}
}
