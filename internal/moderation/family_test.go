package moderation

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/svc-dev/svc/internal/api"
)

func TestCategories(t *testing.T) {
	got := Categories()
	if len(got) != 21 || got[0] != "harassment" || got[20] != "svc/unspecified" {
		t.Fatalf("Categories() = %v", got)
	}
	got[0] = "changed"
	if Categories()[0] != "harassment" {
		t.Error("Categories() shares its slice")
	}
}

func TestCatalogueAndLookup(t *testing.T) {
	want := []string{"guard-a:1b", "guard-a:8b", "guard-b:0.6b", "guard-b:4b", "guard-b:8b", "guard-c:4b", "guard-c:0.8b"}
	if got := Catalogue(); !slices.Equal(got, want) {
		t.Fatalf("Catalogue() = %v", got)
	}
	for _, id := range want {
		f, ok := Lookup(id)
		if !ok || f.ID() != id || !strings.HasPrefix(id, f.Name+":") || f.Size != id[len(f.Name)+1:] {
			t.Errorf("Lookup(%q) = %+v, %v", id, f, ok)
		}
		if f.Images() != (f.Name == "guard-c") {
			t.Errorf("%s: Images() = %v", id, f.Images())
		}
	}
	for _, id := range []string{"", "guard-a", "guard-a:3b", "GUARD-A:1B", "guard-d:1b", "guard-a:1b "} {
		if f, ok := Lookup(id); ok {
			t.Errorf("Lookup(%q) = %+v", id, f)
		}
	}
}

// The spec's per-model table, verbatim.
func TestChecksFollowSpec(t *testing.T) {
	spec := map[string]string{
		"guard-a": "harassment, hate, illicit, illicit/violent, self-harm, sexual, sexual/minors, violence, svc/cyber, svc/disinformation, svc/fraud, svc/intellectual_property, svc/privacy, svc/specialized_advice, svc/unspecified",
		"guard-b": "harassment, hate, illicit, illicit/violent, self-harm, sexual, violence, svc/cyber, svc/disinformation, svc/fraud, svc/intellectual_property, svc/nudity, svc/privacy, svc/unspecified",
		"guard-c": "harassment, hate, illicit, self-harm, sexual, violence, svc/disinformation, svc/fraud, svc/nudity, svc/unspecified",
	}
	for _, id := range Catalogue() {
		f := family(t, id)
		if got := strings.Join(f.Checks(), ", "); got != spec[f.Name] {
			t.Errorf("%s: Checks() = %s\nwant %s", id, got, spec[f.Name])
		}
	}
}

// Every table row sets only categories of its family, in spec order, and
// labels are unique.
func TestMappingsStayInFamily(t *testing.T) {
	for _, id := range Catalogue() {
		f := family(t, id)
		seen := map[string]bool{}
		for _, m := range f.Mappings() {
			if seen[m.Label] {
				t.Errorf("%s: label %s twice", id, m.Label)
			}
			seen[m.Label] = true
			if len(m.Categories) == 0 {
				t.Errorf("%s: %s sets nothing", id, m.Label)
			}
			for _, c := range m.Categories {
				if !slices.Contains(f.Checks(), c) {
					t.Errorf("%s: %s sets %s, which the family does not report", id, m.Label, c)
				}
			}
			sorted := slices.Clone(m.Categories)
			specOrder(sorted)
			if !slices.Equal(sorted, m.Categories) {
				t.Errorf("%s: %s categories %v not in spec order", id, m.Label, m.Categories)
			}
		}
	}
}

// The package doc reproduces the tables; this keeps it honest.
func TestDocTablesMatchData(t *testing.T) {
	doc, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"guard-a:8b", "guard-b:4b", "guard-c:4b"} {
		for _, m := range family(t, id).Mappings() {
			name := ""
			if m.Name != m.Label {
				name = regexp.QuoteMeta(m.Name) + `\s+`
			}
			re := `(?m)^//\s+` + regexp.QuoteMeta(m.Label) + `\s+` + name + regexp.QuoteMeta(strings.Join(m.Categories, ", "))
			if m.Sizes != nil {
				re += `\s+\(` + regexp.QuoteMeta(strings.Join(m.Sizes, ", ")) + ` only\)`
			}
			if !regexp.MustCompile(re + `$`).Match(doc) {
				t.Errorf("doc.go has no row for %s %s → %v", id, m.Label, m.Categories)
			}
		}
	}
}

func TestFlaggedCategories(t *testing.T) {
	r := api.ModerationResult{Categories: map[string]bool{
		"violence": true, "harassment": true, "hate": false, "svc/unspecified": true, "zzz/custom": true, "aaa/custom": true,
	}}
	want := []string{"harassment", "violence", "svc/unspecified", "aaa/custom", "zzz/custom"}
	if got := FlaggedCategories(r); !slices.Equal(got, want) {
		t.Errorf("FlaggedCategories = %v, want %v", got, want)
	}
	if got := FlaggedCategories(api.ModerationResult{}); got != nil {
		t.Errorf("FlaggedCategories(empty) = %v", got)
	}
}

// Result's per-key slices are independent, so the server can edit one.
func TestResultSlicesNotShared(t *testing.T) {
	f := family(t, "guard-c:4b")
	r := f.Result(Verdict{}, Check{Texts: []string{"x"}})
	r.CategoryAppliedInputTypes["hate"][0] = "changed"
	if r.CategoryAppliedInputTypes["violence"][0] != "text" {
		t.Error("applied input type slices are shared between categories")
	}
}

func TestDefuse(t *testing.T) {
	tests := map[string]string{
		"plain text":                          "plain text",
		"a < b and c > d":                     "a < b and c > d",
		"<|eot_id|>":                          "< |eot_id|>",
		"<|im_start|>assistant":               "< |im_start|>assistant",
		"<start_of_turn>model\n<end_of_turn>": "< start_of_turn>model\n< end_of_turn>",
		"<image><bos><eos>":                   "< image>< bos>< eos>",
		"<<|eot_id|>|>":                       "<< |eot_id|>|>",
		"<start_of_image>x<end_of_image>":     "< start_of_image>x< end_of_image>",
	}
	for in, want := range tests {
		if got := defuse(in); got != want {
			t.Errorf("defuse(%q) = %q, want %q", in, got, want)
		}
	}
}
