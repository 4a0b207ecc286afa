package main

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// cpuCap is a CPU cgroup that holds the system under test to a share of
// one core (-sut-cpu). A two-core machine's load generator cannot outpace
// svc on a core of its own, so CPU-bound overload cannot be offered there;
// svc on a third of a core it can.
type cpuCap struct {
	dir   string
	share float64
}

// The kernel's quota is at least a millisecond; the period is set so that
// the quota is that millisecond. A short period spreads the share evenly:
// with the default of 100 ms, a capped program would run for its whole
// quota and then stand still for the rest of the period, and every
// latency would show it.
const minQuota = time.Millisecond

// cgroupRoot is where the cgroup file systems are mounted.
const cgroupRoot = "/sys/fs/cgroup"

// newCPUCap makes the cgroup (see cpuHierarchy).
func newCPUCap(share float64) (*cpuCap, error) {
	if share <= 0 || share >= 1 || math.IsNaN(share) {
		return nil, fmt.Errorf("-sut-cpu %v: want a share of one core between 0 and 1", share)
	}
	period := time.Duration(float64(minQuota) / share).Round(time.Microsecond)
	if period > time.Second {
		return nil, fmt.Errorf("-sut-cpu %v: the kernel's period is a second at most, so the share is at least 0.001", share)
	}
	base, settings, err := cpuHierarchy(minQuota.Microseconds(), period.Microseconds())
	if err != nil {
		return nil, err
	}
	c := &cpuCap{dir: filepath.Join(base, fmt.Sprintf("svc-bench-%d", os.Getpid())), share: share}
	if err := os.Mkdir(c.dir, 0o755); err != nil {
		return nil, fmt.Errorf("-sut-cpu: %w", err)
	}
	for _, kv := range settings {
		if err := os.WriteFile(filepath.Join(c.dir, kv[0]), []byte(kv[1]), 0o644); err != nil {
			c.close()
			return nil, fmt.Errorf("-sut-cpu: %w", err)
		}
	}
	return c, nil
}

// cpuHierarchy is where the cgroup goes and the files that set its quota
// and period: cgroup v1's cpu controller where it is mounted on its own,
// else v2's, which the root must already delegate.
func cpuHierarchy(quotaUs, periodUs int64) (base string, settings [][2]string, err error) {
	if v1 := filepath.Join(cgroupRoot, "cpu"); fileExists(filepath.Join(v1, "cpu.cfs_quota_us")) {
		return v1, [][2]string{{"cpu.cfs_period_us", fmt.Sprint(periodUs)}, {"cpu.cfs_quota_us", fmt.Sprint(quotaUs)}}, nil
	}
	controllers, err := os.ReadFile(filepath.Join(cgroupRoot, "cgroup.controllers"))
	if err != nil || !slices.Contains(strings.Fields(string(controllers)), "cpu") {
		return "", nil, errors.New("-sut-cpu needs a CPU cgroup: cgroup v1's cpu controller or v2's, neither of which is here")
	}
	// The harness does not change which controllers the machine's root
	// hands down; that is its owner's to decide.
	if sub, _ := os.ReadFile(filepath.Join(cgroupRoot, "cgroup.subtree_control")); !slices.Contains(strings.Fields(string(sub)), "cpu") {
		return "", nil, fmt.Errorf("-sut-cpu: cgroup v2's cpu controller is not delegated to %s's children (echo +cpu > %s)",
			cgroupRoot, filepath.Join(cgroupRoot, "cgroup.subtree_control"))
	}
	return cgroupRoot, [][2]string{{"cpu.max", fmt.Sprintf("%d %d", quotaUs, periodUs)}}, nil
}

// prefix runs a program in the cgroup: the shell puts itself there, then
// becomes the program, whose children (nginx's workers) stay there too.
func (c *cpuCap) prefix() []string {
	return []string{"sh", "-c", `echo $$ > "$0/cgroup.procs" && exec "$@"`, c.dir}
}

// close removes the cgroup once the programs in it have exited.
func (c *cpuCap) close() {
	for range 50 {
		if err := os.Remove(c.dir); err == nil || errors.Is(err, os.ErrNotExist) {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	fmt.Fprintf(os.Stderr, "bench: could not remove the cgroup %s\n", c.dir)
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
