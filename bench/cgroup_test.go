package main

import (
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func TestCPUCapRefusesShares(t *testing.T) {
	for _, share := range []float64{0, -0.5, 1, 2, math.NaN(), 0.0005} {
		if c, err := newCPUCap(share); err == nil {
			c.close()
			t.Errorf("-sut-cpu %v: no error", share)
		}
	}
}

// A program started through the cap runs in its cgroup, whose quota is a
// millisecond in a period that gives the share; the cgroup goes with
// close. Skipped where no CPU cgroup can be made.
func TestCPUCap(t *testing.T) {
	c, err := newCPUCap(0.25)
	if err != nil {
		t.Skipf("no CPU cgroup here: %v", err)
	}
	quota, period := "1000", "4000"
	if b, err := os.ReadFile(filepath.Join(c.dir, "cpu.max")); err == nil {
		if got, want := strings.TrimSpace(string(b)), quota+" "+period; got != want {
			t.Errorf("cpu.max %q, want %q", got, want)
		}
	} else {
		q, _ := os.ReadFile(filepath.Join(c.dir, "cpu.cfs_quota_us"))
		p, _ := os.ReadFile(filepath.Join(c.dir, "cpu.cfs_period_us"))
		if strings.TrimSpace(string(q)) != quota || strings.TrimSpace(string(p)) != period {
			t.Errorf("quota %q in a period of %q, want %s in %s", q, p, quota, period)
		}
	}
	argv := append(c.prefix(), "cat", "/proc/self/cgroup")
	out, err := exec.Command(argv[0], argv[1:]...).Output()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), "/"+filepath.Base(c.dir)+"\n") {
		t.Errorf("the program ran in\n%s\nnot in %s", out, c.dir)
	}
	c.close()
	if _, err := os.Stat(c.dir); !os.IsNotExist(err) {
		t.Errorf("the cgroup is still there after close: %v", err)
	}
}
