package transcription

import (
	"testing"

	"github.com/svc-dev/svc/internal/api"
)

func TestParseLive(t *testing.T) {
	q := func(kv map[string]string) func(string) string { return func(k string) string { return kv[k] } }
	r, err := ParseLive(q(map[string]string{"model": "whisper"}))
	if err != nil || r.Model != "whisper" || r.Params.SampleRate != 16000 || r.Params.Language != "" {
		t.Fatalf("defaults: %+v %v", r, err)
	}
	if r.MaxBytes() != 32000*1800 {
		t.Fatalf("max bytes %d", r.MaxBytes())
	}
	r, err = ParseLive(q(map[string]string{"model": "w", "sample_rate": "48000", "language": "DE"}))
	if err != nil || r.Params.SampleRate != 48000 || r.Params.Language != "de" {
		t.Fatalf("%+v %v", r, err)
	}
	for _, bad := range []map[string]string{
		{},
		{"model": " "},
		{"model": "w", "sample_rate": "7999"},
		{"model": "w", "sample_rate": "48001"},
		{"model": "w", "sample_rate": "16k"},
		{"model": "w", "language": "english"},
		{"model": "w", "language": "xx"},
	} {
		_, err := ParseLive(q(bad))
		if err == nil || api.ErrorOf(err).HTTPStatus() != 400 {
			t.Fatalf("%v: %v", bad, err)
		}
	}
}
