package bolt

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

// TestEnsureDirRestricts: a data directory that is new, or was made
// beforehand with group and other access, ends up its owner's only.
func TestEnsureDirRestricts(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("no unix modes")
	}
	for _, tc := range []struct {
		name string
		pre  os.FileMode // 0: the directory does not exist yet
		want os.FileMode
	}{
		{"new", 0, 0o700},
		{"made 0755", 0o755, 0o700},
		{"made 0777", 0o777, 0o700},
		{"made 0750", 0o750, 0o700},
		{"already 0700", 0o700, 0o700},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "data")
			if tc.pre != 0 {
				if err := os.Mkdir(dir, tc.pre); err != nil {
					t.Fatal(err)
				}
				if err := os.Chmod(dir, tc.pre); err != nil { // past the umask
					t.Fatal(err)
				}
			}
			if err := EnsureDir(dir); err != nil {
				t.Fatal(err)
			}
			fi, err := os.Stat(dir)
			if err != nil {
				t.Fatal(err)
			}
			if got := fi.Mode().Perm(); got != tc.want {
				t.Errorf("mode %04o, want %04o", got, tc.want)
			}
		})
	}
}
