package e2e

import (
	"bytes"
	"net/http"
	"sync"
	"testing"
)

// TestConcurrentUploadsMemory: ten transcriptions of a 25 MB WAV at once
// are spooled to disk as they arrive, not held in the gateway's memory.
// The bound is loose on purpose (the collector and the machine vary); the
// peak is logged for a closer look.
func TestConcurrentUploadsMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("sends 250 MB")
	}
	s, key := audioGateway(t, "tps=0,ttft=0,rtf=0")
	// 819 s of 16 kHz 16-bit mono: just under the 25 MB file limit.
	ct, body := upload(t, tone(t, 819, 16000), "model", "stt-large-v3")
	_, before := statusKB(t, s.Pid())
	const uploads = 10
	var wg sync.WaitGroup
	status := make([]int, uploads)
	for i := range uploads {
		wg.Go(func() {
			req, _ := http.NewRequest("POST", s.URL+"/v1/audio/transcriptions", bytes.NewReader(body))
			req.Header.Set("Content-Type", ct)
			req.Header.Set("Authorization", "Bearer "+key)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Errorf("upload %d: %v", i, err)
				return
			}
			resp.Body.Close()
			status[i] = resp.StatusCode
		})
	}
	wg.Wait()
	_, peak := statusKB(t, s.Pid())
	t.Logf("gateway peak RSS (VmHWM): %d MiB before, %d MiB after %d concurrent uploads of %d MB",
		before>>10, peak>>10, uploads, len(body)>>20)
	for i, st := range status {
		if st != 200 && st != 429 {
			t.Errorf("upload %d = %d", i, st)
		}
	}
	if peak > 400<<10 {
		t.Errorf("the gateway's peak RSS is %d MiB", peak>>10)
	}
}
