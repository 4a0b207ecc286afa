package cli

import (
	"bytes"
	"flag"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the committed completions/ and man/ from the command tree")

// The committed completion scripts and man pages must match what the
// command tree generates: run `go test ./internal/cli -run Generated -update`
// after changing a command.
func TestGeneratedCompletions(t *testing.T) {
	for shell, file := range map[string]string{"bash": "svc.bash", "zsh": "_svc", "fish": "svc.fish"} {
		t.Run(shell, func(t *testing.T) {
			// Cobra's completion command writes to the command's own
			// output, not the factory's streams.
			root := NewCmdRoot(testFactory(nil))
			var out bytes.Buffer
			root.SetArgs([]string{"completion", shell})
			root.SetOut(&out)
			root.SetErr(io.Discard)
			if _, err := root.ExecuteC(); err != nil {
				t.Fatal(err)
			}
			if out.Len() == 0 {
				t.Fatal("no completion script written")
			}
			compare(t, filepath.Join("..", "..", "completions", file), out.Bytes())
		})
	}
}

// The page date is the month of generation; it is not content.
var manDate = regexp.MustCompile(`(?m)^(\.TH "[^"]*" "[^"]*") "[^"]*"`)

func TestGeneratedManPages(t *testing.T) {
	dir := t.TempDir()
	if err := run(NewCmdRoot(testFactory(nil)), "man", "--dir", dir); err != nil {
		t.Fatal(err)
	}
	committed := filepath.Join("..", "..", "man")
	gen, _ := filepath.Glob(filepath.Join(dir, "*.1"))
	have, _ := filepath.Glob(filepath.Join(committed, "*.1"))
	names := func(ps []string) []string {
		out := make([]string, len(ps))
		for i, p := range ps {
			out[i] = filepath.Base(p)
		}
		return out
	}
	if len(gen) == 0 {
		t.Fatal("no man pages generated")
	}
	if *update {
		for _, p := range have {
			if !slices.Contains(names(gen), filepath.Base(p)) {
				_ = os.Remove(p)
			}
		}
	} else if !slices.Equal(names(gen), names(have)) {
		t.Fatalf("man pages\n got %v\nwant %v\nrun: go test ./internal/cli -run Generated -update", names(gen), names(have))
	}
	for _, p := range gen {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		compare(t, filepath.Join(committed, filepath.Base(p)), b)
	}
}

func compare(t *testing.T, path string, got []byte) {
	t.Helper()
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v; run: go test ./internal/cli -run Generated -update", err)
	}
	if !bytes.Equal(manDate.ReplaceAll(got, []byte("$1")), manDate.ReplaceAll(want, []byte("$1"))) {
		t.Fatalf("%s is stale; run: go test ./internal/cli -run Generated -update", path)
	}
}
