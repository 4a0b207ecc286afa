// Package power reads how much power a worker's machine draws and turns
// the readings into the energy windows and live figures the gateway keeps
// (api.PowerWindow, api.LivePower).
//
// # Channels
//
// A machine has one channel per GPU (gpu0, gpu1, ...), one for the
// processor (cpu, or soc when one sensor covers the whole chip) and one
// for the whole machine (system). Each comes from the best source found:
//
//   - NVIDIA GPUs: NVML, loaded at run time without cgo; the cumulative
//     energy counter where the GPU has one (Volta and later), else sampled
//     power. Without the library, nvidia-smi is polled instead.
//   - AMD GPUs: the amdgpu hwmon files under /sys/class/drm.
//   - cpu: RAPL package domains under /sys/class/powercap, summed over
//     packages. The core and uncore domains are parts of the package and
//     are not added again; dram is outside the package and is not added
//     either, so cpu is the processor alone, comparable across machines
//     (most AMD parts and most VMs have no dram domain at all). The psys
//     (platform) domain is not used: it covers parts of the board beyond
//     the chip, yet not the whole machine, and reads nothing on many
//     desktops and servers.
//   - soc: a hwmon power or energy input labelled "SoC" or "SoC ..." (as
//     machines whose CPU and GPU share one chip label their whole-chip
//     sensor). Rail sensors such as zenpower's "SVI2_P_SoC" or Jetson's
//     "VDD_SOC" measure one supply of the chip and do not qualify. When a
//     soc sensor exists it replaces cpu, which it contains.
//   - system, measured: the ACPI power meter (hwmon "power_meter") where
//     there is one, else hwmon power supply sensors (a device whose name
//     or label names a PSU or power supply; its input, not its rails),
//     summed over supplies; else IPMI DCMI through ipmitool.
//   - system, estimated: where nothing measures the whole machine, the
//     sum of the GPU and cpu/soc channels plus a fixed baseline for the
//     rest (board, memory, fans, disks, supply losses). An interval in
//     which any of those channels has no reading has no estimate either:
//     a partial sum would read as a quiet machine.
//
// Devices are looked for again every minute, so a card that appears or
// goes is picked up without disturbing the other channels.
//
// # Energy
//
// Every sample (once a second) turns each channel's last two readings
// into a stretch of power: from a counter, the energy between them (so
// spikes between samples are counted); from power readings, a straight
// line between them (a trapezoid). Readings further apart than five
// sampling intervals (a source that stopped answering, a paused machine)
// or a counter that went backwards (a driver reload) leave a gap rather
// than a guess; a reading missed now and then is bridged. Stretches are
// cut at window boundaries (ten seconds by default, aligned to the wall
// clock) and summed into each window's joules, covered seconds and peak
// watts; a channel with no stretch in a window is absent from its maps.
//
// # Energy per request
//
// Each interval's GPU energy (all GPU channels together) is shared among
// the requests generating during it: at every moment equally among the
// requests active then, so a request alone gets all the energy of its
// active time and two overlapping requests halve the overlap. When a
// request ends between samples, the stretch since the last sample is
// charged at the last GPU power seen. This is an estimate, not a meter:
//
//   - NVML's counter advances every 20-100 ms, and power-only GPUs are
//     sampled once a second, so a request shorter than a second or two is
//     charged mostly from the surrounding samples;
//   - concurrent requests are charged equally, whatever their share of the
//     GPU's work (a long prompt and a short one cost the same per second);
//   - the GPU's idle power during a request is included, while energy drawn
//     when no request is running is charged to none;
//   - CPU, memory and the rest of the machine are not included.
package power
