package fleet

import (
	"slices"
	"testing"
	"testing/synctest"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/link"
)

func TestWorkerListsItsGPUs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, Config{})
		bare := h.worker("o", "cpu-only", 1, chat("m"))
		got := h.settled(bare.id, "o")
		if got.GPUs == nil || len(got.GPUs) != 0 || got.GPUCount != 0 || got.DriverVersion != nil {
			t.Fatalf("a worker without GPUs: gpus=%v count=%d driver=%v", got.GPUs, got.GPUCount, got.DriverVersion)
		}

		gpus := []api.GPU{{Index: 0, Name: "NVIDIA H100 80GB HBM3", MemoryTotalMiB: 81559, MemoryUsedMiB: 1024},
			{Index: 1, Name: "NVIDIA H100 80GB HBM3", MemoryTotalMiB: 81559}}
		w := &fakeWorker{h: h, hello: api.Hello{Protocol: link.Protocol, Name: "gpu-box", Version: "v1", MaxConcurrent: 1,
			SessionID: "s", Models: []api.Model{chat("m")},
			Heartbeat: &api.Heartbeat{GPUs: gpus, DriverVersion: "550.54.15"}}}
		w.sess = link.NewSession(link.Options{Role: link.Worker, Accept: w.serve})
		t.Cleanup(func() { w.sess.Close(nil) })
		w.connect("o")
		got = h.settled(w.id, "o")
		if !slices.Equal(got.GPUs, gpus) || got.GPUCount != 2 || got.DriverVersion == nil || *got.DriverVersion != "550.54.15" {
			t.Fatalf("gpus=%+v count=%d driver=%v", got.GPUs, got.GPUCount, got.DriverVersion)
		}
	})
}
