//go:build linux && !nonvml

package power

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/ebitengine/purego"
)

// nvmlLibrary is the driver's NVML, installed with every NVIDIA driver.
const nvmlLibrary = "libnvidia-ml.so.1"

// nvmlSuccess is NVML_SUCCESS, the nvmlReturn_t of a call that worked.
const nvmlSuccess = 0

// nvmlNameSize is NVML_DEVICE_NAME_V2_BUFFER_SIZE.
const nvmlNameSize = 96

// nvmlLib calls libnvidia-ml through purego, so that the binary needs no
// cgo and starts on machines without the library. Functions the driver
// lacks (the energy counter before Volta) stay nil and report "not
// supported".
type nvmlLib struct {
	errorString     func(ret int32) string
	deviceCount     func(count *uint32) int32
	handleByIndex   func(index uint32, dev *uintptr) int32
	name            func(dev uintptr, name *byte, length uint32) int32
	totalEnergy     func(dev uintptr, mj *uint64) int32
	powerUsage      func(dev uintptr, mw *uint32) int32
	enforcedLimit   func(dev uintptr, mw *uint32) int32
	managementLimit func(dev uintptr, mw *uint32) int32
	memoryInfo      func(dev uintptr, mem *nvmlMemory) int32
	driverVersion   func(version *byte, length uint32) int32
}

// nvmlMemory is nvmlMemory_t, in bytes; the free figure between the two
// is only kept for the layout.
type nvmlMemory struct {
	total uint64
	_     uint64
	used  uint64
}

// nvmlVersionSize is NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE.
const nvmlVersionSize = 80

// openNVML loads and initialises NVML. The library stays loaded, and
// initialised, for the life of the process: the sampler reads it until
// then, and the driver cleans up after the process.
func openNVML() (NVML, error) { return openNVMLAt(nvmlLibrary) }

func openNVMLAt(path string) (NVML, error) {
	h, err := purego.Dlopen(path, purego.RTLD_NOW|purego.RTLD_LOCAL)
	if err != nil {
		return nil, fmt.Errorf("load NVML: %w", err) // dlerror names the file
	}
	l := &nvmlLib{}
	var initV2 func() int32
	required := []struct {
		fn   any
		name string
	}{
		{&initV2, "nvmlInit_v2"},
		{&l.errorString, "nvmlErrorString"},
		{&l.deviceCount, "nvmlDeviceGetCount_v2"},
		{&l.handleByIndex, "nvmlDeviceGetHandleByIndex_v2"},
		{&l.name, "nvmlDeviceGetName"},
		{&l.powerUsage, "nvmlDeviceGetPowerUsage"},
	}
	for _, f := range required {
		if err := bind(h, f.fn, f.name); err != nil {
			_ = purego.Dlclose(h)
			return nil, fmt.Errorf("load %s: %w", path, err)
		}
	}
	_ = bind(h, &l.totalEnergy, "nvmlDeviceGetTotalEnergyConsumption")
	_ = bind(h, &l.enforcedLimit, "nvmlDeviceGetEnforcedPowerLimit")
	_ = bind(h, &l.managementLimit, "nvmlDeviceGetPowerManagementLimit")
	_ = bind(h, &l.memoryInfo, "nvmlDeviceGetMemoryInfo")
	_ = bind(h, &l.driverVersion, "nvmlSystemGetDriverVersion")
	if err := l.check("nvmlInit", initV2()); err != nil {
		_ = purego.Dlclose(h)
		return nil, err
	}
	return l, nil
}

// bind points fn at the library's function name. RegisterLibFunc would
// panic on a missing symbol; an old driver must only lose a feature.
func bind(h uintptr, fn any, name string) error {
	sym, err := purego.Dlsym(h, name)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	purego.RegisterFunc(fn, sym)
	return nil
}

// nvmlError is a failed NVML call.
type nvmlError struct {
	op   string
	code int32
	msg  string
}

func (e *nvmlError) Error() string { return fmt.Sprintf("%s: %s (NVML error %d)", e.op, e.msg, e.code) }

func (l *nvmlLib) check(op string, ret int32) error {
	if ret == nvmlSuccess {
		return nil
	}
	return &nvmlError{op: op, code: ret, msg: l.errorString(ret)}
}

// device looks the handle up at every call: handles are cheap, and a
// stale one after a driver reload would be worse than a lookup.
func (l *nvmlLib) device(i int) (uintptr, error) {
	var dev uintptr
	if ret := l.handleByIndex(uint32(i), &dev); ret != nvmlSuccess {
		return 0, l.check(fmt.Sprintf("device %d", i), ret)
	}
	return dev, nil
}

func (l *nvmlLib) DeviceCount() (int, error) {
	var n uint32
	if err := l.check("device count", l.deviceCount(&n)); err != nil {
		return 0, err
	}
	return int(n), nil
}

func (l *nvmlLib) DeviceName(i int) (string, error) {
	dev, err := l.device(i)
	if err != nil {
		return "", err
	}
	var buf [nvmlNameSize]byte
	if err := l.check("device name", l.name(dev, &buf[0], uint32(len(buf)))); err != nil {
		return "", err
	}
	name, _, _ := bytes.Cut(buf[:], []byte{0})
	return string(name), nil
}

func (l *nvmlLib) TotalEnergy(i int) (uint64, error) {
	if l.totalEnergy == nil {
		return 0, errors.New("total energy: not in this driver")
	}
	dev, err := l.device(i)
	if err != nil {
		return 0, err
	}
	var mj uint64
	return mj, l.check("total energy", l.totalEnergy(dev, &mj))
}

func (l *nvmlLib) PowerUsage(i int) (uint32, error) {
	dev, err := l.device(i)
	if err != nil {
		return 0, err
	}
	var mw uint32
	return mw, l.check("power usage", l.powerUsage(dev, &mw))
}

// PowerLimit is the enforced limit, which accounts for every constraint,
// else the management limit set by the administrator.
func (l *nvmlLib) PowerLimit(i int) (uint32, error) {
	dev, err := l.device(i)
	if err != nil {
		return 0, err
	}
	var mw uint32
	if l.enforcedLimit != nil {
		if err := l.check("enforced power limit", l.enforcedLimit(dev, &mw)); err == nil {
			return mw, nil
		}
	}
	if l.managementLimit == nil {
		return 0, errors.New("power limit: not in this driver")
	}
	return mw, l.check("power limit", l.managementLimit(dev, &mw))
}

func (l *nvmlLib) MemoryInfo(i int) (total, used uint64, err error) {
	if l.memoryInfo == nil {
		return 0, 0, errors.New("memory info: not in this driver")
	}
	dev, err := l.device(i)
	if err != nil {
		return 0, 0, err
	}
	var m nvmlMemory
	if err := l.check("memory info", l.memoryInfo(dev, &m)); err != nil {
		return 0, 0, err
	}
	return m.total, m.used, nil
}

func (l *nvmlLib) DriverVersion() (string, error) {
	if l.driverVersion == nil {
		return "", errors.New("driver version: not in this driver")
	}
	var buf [nvmlVersionSize]byte
	if err := l.check("driver version", l.driverVersion(&buf[0], uint32(len(buf)))); err != nil {
		return "", err
	}
	v, _, _ := bytes.Cut(buf[:], []byte{0})
	return string(v), nil
}
