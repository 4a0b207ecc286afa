package cli

import (
	"strings"
	"testing"
)

// The commands' own refusals, before anything is sent.
func TestAudioUsageErrors(t *testing.T) {
	tests := []struct {
		name string
		run  cliRun
		args []string
		msg  string
	}{
		{"audio to a terminal", cliRun{tty: true}, []string{"speak", "hello"}, "refusing to write audio to a terminal"},
		{"no text", cliRun{stdinTTY: true}, []string{"speak"}, "no text"},
		{"blank text", cliRun{}, []string{"speak", "  ", "-o", "x.wav"}, "no text"},
		{"speed", cliRun{}, []string{"speak", "hi", "--speed", "5", "-o", "x.wav"}, "--speed must be between 0.25 and 4"},
		{"format", cliRun{}, []string{"transcribe", "a.wav", "--format", "mp3"}, "--format must be one of"},
		{"json with subtitles", cliRun{}, []string{"transcribe", "a.wav", "--json", "--format", "srt"}, "--json prints JSON"},
		{"timestamps without verbose_json", cliRun{}, []string{"transcribe", "a.wav", "--timestamps", "word"}, "--timestamps needs"},
		{"unknown granularity", cliRun{}, []string{"transcribe", "a.wav", "--format", "verbose_json", "--timestamps", "line"}, "--timestamps takes"},
		{"temperature", cliRun{}, []string{"transcribe", "a.wav", "--temperature", "2"}, "--temperature must be between 0 and 1"},
		{"temperature NaN", cliRun{}, []string{"transcribe", "a.wav", "--temperature", "NaN"}, "--temperature must be between 0 and 1"},
		{"speed NaN", cliRun{}, []string{"speak", "hi", "--speed", "NaN", "-o", "x.wav"}, "--speed must be between 0.25 and 4"},
		{"beam", cliRun{}, []string{"transcribe", "a.wav", "--beam-size", "0"}, "--beam-size must be 1 to 8"},
		{"no file", cliRun{}, []string{"transcribe"}, "takes 1 argument"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := tt.run.run(t, tt.args...)
			if r.code != 2 || !strings.Contains(r.stderr, tt.msg) {
				t.Fatalf("exit %d, stderr %q; want 2 with %q", r.code, r.stderr, tt.msg)
			}
		})
	}
}

// Text piped in is sent without its last line's end.
func TestSpeakStdinDropsTheNewline(t *testing.T) {
	g := newFakeGateway(t, map[string]fakeReply{
		"POST /v1/audio/speech": {body: "speech.json"},
	})
	r := cliRun{env: gatewayEnv(g), stdin: "line one\nline two\r\n\n"}.run(t, "speak", "-", "--model", "tts", "--json")
	if r.code != 0 {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
	if sent := g.last("/v1/audio/speech").Body; !strings.Contains(sent, `"input":"line one\nline two"`) {
		t.Fatalf("sent %s", sent)
	}
}

// JSON output is text, so it may go to a terminal.
func TestSpeakJSONToATerminal(t *testing.T) {
	g := newFakeGateway(t, map[string]fakeReply{
		"POST /v1/audio/speech": {body: "speech.json"},
	})
	r := cliRun{env: gatewayEnv(g), tty: true}.run(t, "speak", "hello", "--model", "tts", "--json")
	if r.code != 0 || !strings.Contains(r.stdout, `"duration_ms": 10`) || !strings.Contains(r.stdout, `"audio": "UklGR`) {
		t.Fatalf("exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	if sent := g.last("/v1/audio/speech").Body; !strings.Contains(sent, `"input":"hello"`) || !strings.Contains(sent, `"model":"tts"`) {
		t.Fatalf("sent %s", sent)
	}
}
