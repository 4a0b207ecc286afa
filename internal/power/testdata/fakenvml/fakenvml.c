/*
 * A stand-in for libnvidia-ml.so.1 with the functions the power package
 * binds, for testing the purego binding where there is no NVIDIA driver.
 * Two devices: an H100 with an energy counter that advances 1000 mJ per
 * call, and a P100 without one whose enforced limit is not supported.
 * FAKE_NVML_INIT=9 makes nvmlInit_v2 fail as with no driver loaded.
 * Built with -DNO_ENERGY it lacks nvmlDeviceGetTotalEnergyConsumption,
 * like drivers older than Volta support. Built with -DNO_DETAILS it lacks
 * the memory and driver version calls, so that their absence is tested.
 * The H100 has 81559 MiB with 1024 MiB used; the P100's memory read fails.
 */
#include <stdlib.h>
#include <string.h>

typedef int nvmlReturn_t;
typedef struct device { const char *name; int energy; unsigned long long mj; unsigned int mw, limit; } *nvmlDevice_t;

static struct device devices[] = {
	{"NVIDIA H100 80GB HBM3", 1, 5000000, 250000, 700000},
	{"Tesla P100-PCIE-16GB", 0, 0, 45500, 250000},
};

nvmlReturn_t nvmlInit_v2(void) {
	const char *e = getenv("FAKE_NVML_INIT");
	return e ? atoi(e) : 0;
}

const char *nvmlErrorString(nvmlReturn_t r) {
	switch (r) {
	case 2: return "Invalid Argument";
	case 3: return "Not Supported";
	case 9: return "Driver Not Loaded";
	}
	return "Unknown Error";
}

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *n) { *n = 2; return 0; }

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int i, nvmlDevice_t *d) {
	if (i >= 2) return 2;
	*d = &devices[i];
	return 0;
}

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t d, char *name, unsigned int length) {
	if (strlen(d->name) + 1 > length) return 2;
	strcpy(name, d->name);
	return 0;
}

#ifndef NO_ENERGY
nvmlReturn_t nvmlDeviceGetTotalEnergyConsumption(nvmlDevice_t d, unsigned long long *mj) {
	if (!d->energy) return 3;
	d->mj += 1000;
	*mj = d->mj;
	return 0;
}
#endif

nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t d, unsigned int *mw) { *mw = d->mw; return 0; }

nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(nvmlDevice_t d, unsigned int *mw) {
	if (d == &devices[1]) return 3;
	*mw = d->limit;
	return 0;
}

nvmlReturn_t nvmlDeviceGetPowerManagementLimit(nvmlDevice_t d, unsigned int *mw) { *mw = d->limit; return 0; }

#ifndef NO_DETAILS
typedef struct { unsigned long long total, free, used; } nvmlMemory_t;

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t d, nvmlMemory_t *m) {
	if (d == &devices[1]) return 3;
	m->total = 81559ULL << 20;
	m->used = 1024ULL << 20;
	m->free = m->total - m->used;
	return 0;
}

nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length) {
	const char *v = "550.54.15";
	if (strlen(v) + 1 > length) return 2;
	strcpy(version, v);
	return 0;
}
#endif
