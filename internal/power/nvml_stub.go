//go:build !linux || nonvml

package power

import "errors"

// openNVML has no library to load: NVIDIA's NVML is read on Linux, and
// the nonvml build tag leaves it out for a binary with no dynamic loader
// dependency at all. nvidia-smi still works.
func openNVML() (NVML, error) { return nil, errors.New("NVML is not built into this binary") }
