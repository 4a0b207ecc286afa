package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/client"
	"github.com/svc-dev/svc/internal/iostreams"
)

// TranscribeOptions are the arguments and flags of `svc transcribe`.
type TranscribeOptions struct {
	IO        *iostreams.IOStreams
	APIClient func() (*client.Client, error)
	Exporter  Exporter

	File          string // a path, or - for stdin
	Model         string
	Format        string
	Language      string
	Prompt        string
	Temperature   *float64
	BeamSize      int
	Granularities []string
}

var transcriptFormats = []string{"text", "json", "verbose_json", "srt", "vtt"}

// NewCmdTranscribe builds `svc transcribe`.
func NewCmdTranscribe(f *Factory, runF func(*TranscribeOptions) error) *cobra.Command {
	opts := &TranscribeOptions{IO: f.IO}
	var e2e *e2eFlags
	var temperature float64
	cmd := &cobra.Command{
		Use:   "transcribe FILE",
		Short: "Turn speech in an audio file into text",
		Long: `Upload FILE (wav, mp3 or flac, at most 25 MB; - reads stdin) for transcription
and print the transcript: plain text by default, or as --format says (srt and
vtt are subtitle files). The file is streamed, never read whole into memory.

--json prints the gateway's JSON reply (verbose_json unless --format json),
with the serving worker in svc; --jq filters it. --timestamps word adds
word-level timings to it.

` + clientHelp,
		Example: `  svc transcribe meeting.mp3
  svc transcribe talk.wav --format srt > talk.srt
  svc transcribe note.flac --language de --json --jq '.segments[].text'`,
		GroupID:           groupClient,
		Args:              exactArgs(1),
		ValidArgsFunction: cobra.FixedCompletions(nil, cobra.ShellCompDirectiveDefault),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.File = args[0]
			if !slices.Contains(transcriptFormats, opts.Format) {
				return usageErrorf("--format must be one of %s, got %q", strings.Join(transcriptFormats, ", "), opts.Format)
			}
			if err := opts.Exporter.Prepare(); err != nil {
				return err
			}
			if opts.Exporter.Enabled() {
				switch {
				case !cmd.Flags().Changed("format"):
					opts.Format = "verbose_json"
				case opts.Format != "json" && opts.Format != "verbose_json":
					return usageErrorf("--json prints JSON: use --format json or verbose_json with it, not %s", opts.Format)
				}
			}
			for _, g := range opts.Granularities {
				if g != "segment" && g != "word" {
					return usageErrorf("--timestamps takes segment and word, got %q", g)
				}
			}
			if len(opts.Granularities) > 0 && opts.Format != "verbose_json" {
				return usageErrorf("--timestamps needs --format verbose_json (or --json)")
			}
			if cmd.Flags().Changed("temperature") {
				if !(temperature >= 0 && temperature <= 1) { // NaN too
					return usageErrorf("--temperature must be between 0 and 1, got %g", temperature)
				}
				opts.Temperature = &temperature
			}
			if cmd.Flags().Changed("beam-size") && (opts.BeamSize < 1 || opts.BeamSize > 8) {
				return usageErrorf("--beam-size must be 1 to 8, got %d", opts.BeamSize)
			}
			var err error
			if opts.APIClient, err = e2e.clientFunc(f, cmd); err != nil {
				return err
			}
			if runF != nil {
				return runF(opts)
			}
			return f.explainAPIError(cmd, transcribeRun(cmd.Context(), opts))
		},
	}
	fl := cmd.Flags()
	fl.StringVarP(&opts.Model, "model", "m", "stt-large-v3-turbo", "speech-to-text model")
	fl.StringVarP(&opts.Format, "format", "f", "text", "text, json, verbose_json, srt or vtt")
	fl.StringVarP(&opts.Language, "language", "l", "", "the spoken language as an ISO 639-1 code (default: detected)")
	fl.StringVar(&opts.Prompt, "prompt", "", "text that primes the model: names, spelling, style")
	fl.Float64Var(&temperature, "temperature", 0, "0 to 1; above 0 samples instead of beam search")
	fl.IntVar(&opts.BeamSize, "beam-size", 0, "beam width 1-8 at temperature 0 (default 5)")
	fl.StringSliceVar(&opts.Granularities, "timestamps", nil, "timestamp granularities: segment, word")
	_ = cmd.RegisterFlagCompletionFunc("model", completeModels(f, api.CapTranscription))
	_ = cmd.RegisterFlagCompletionFunc("format", cobra.FixedCompletions(transcriptFormats, cobra.ShellCompDirectiveNoFileComp))
	e2e = addE2EFlags(cmd, "hears it")
	AddClientFlags(cmd)
	opts.Exporter.AddFlags(cmd, false)
	return cmd
}

func transcribeRun(ctx context.Context, opts *TranscribeOptions) error {
	t := client.Transcription{
		Model: opts.Model, ResponseFormat: opts.Format, Language: opts.Language, Prompt: opts.Prompt,
		Temperature: opts.Temperature, BeamSize: opts.BeamSize, Granularities: opts.Granularities,
		File: opts.IO.In, FileName: "stdin", Size: -1,
	}
	if opts.File != "-" {
		fh, err := os.Open(opts.File)
		if err != nil {
			return fmt.Errorf("open the audio: %w", err)
		}
		defer fh.Close()
		st, err := fh.Stat()
		if err != nil {
			return fmt.Errorf("open the audio: %w", err)
		}
		if !st.Mode().IsRegular() {
			return usageErrorf("%s is not a regular file", opts.File)
		}
		t.File, t.FileName, t.Size = fh, filepath.Base(opts.File), st.Size()
	}
	c, err := opts.APIClient()
	if err != nil {
		return err
	}
	body, _, err := c.Transcribe(ctx, t)
	if err != nil {
		return err
	}
	if opts.Exporter.Enabled() {
		return opts.Exporter.Write(opts.IO.Out, json.RawMessage(body))
	}
	if len(body) > 0 && body[len(body)-1] != '\n' {
		// JSON and some engines' text end without one; a shell prompt
		// after the output should start on its own line.
		body = append(body, '\n')
	}
	_, err = opts.IO.Out.Write(body)
	return err
}

// SpeakOptions are the arguments and flags of `svc speak`.
type SpeakOptions struct {
	IO        *iostreams.IOStreams
	APIClient func() (*client.Client, error)
	Exporter  Exporter

	Text   string
	Model  string // "" picks the fleet's first speech model
	Voice  string
	Speed  float64
	Output string // a path; "" or - is stdout
}

// NewCmdSpeak builds `svc speak`.
func NewCmdSpeak(f *Factory, runF func(*SpeakOptions) error) *cobra.Command {
	opts := &SpeakOptions{IO: f.IO}
	var e2e *e2eFlags
	cmd := &cobra.Command{
		Use:   "speak TEXT|-",
		Short: "Turn text into speech (a WAV file)",
		Long: `Speak TEXT (- or no TEXT reads it from stdin; at most 4,096 characters) and
write the audio, a 24 kHz 16-bit mono WAV file, to -o FILE or to stdout. It
will not write audio to a terminal: give -o or redirect stdout.

Without --model the first speech model of the fleet speaks; --voice picks one
of its voices ('svc models --json' lists them). --json prints what the gateway said
about the audio (duration, request id, worker) instead, and the base64 audio
too unless -o saves it.

` + clientHelp,
		Example: `  svc speak "Your build is ready." -o ready.wav
  svc speak --voice en-gb "Good morning" | aplay
  fortune | svc speak - --model espeak-ng -o fortune.wav --json`,
		GroupID: groupClient,
		Args:    rangeArgs(0, 1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 1 && args[0] != "-" {
				opts.Text = args[0]
			} else {
				if opts.IO.IsStdinTTY() {
					return usageErrorf("no text: give TEXT or pipe it on stdin")
				}
				b, err := io.ReadAll(io.LimitReader(opts.IO.In, 1<<20))
				if err != nil {
					return fmt.Errorf("read the text from stdin: %w", err)
				}
				// Piped text ends in the line's newline, which is no
				// part of what to say: it would be spoken as a pause and
				// counted against the 4,096 characters.
				opts.Text = strings.TrimRight(string(b), "\r\n")
			}
			if strings.TrimSpace(opts.Text) == "" {
				return usageErrorf("no text to speak")
			}
			if cmd.Flags().Changed("speed") && !(opts.Speed >= 0.25 && opts.Speed <= 4) { // NaN too
				return usageErrorf("--speed must be between 0.25 and 4, got %g", opts.Speed)
			}
			if err := opts.Exporter.Prepare(); err != nil {
				return err
			}
			toStdout := opts.Output == "" || opts.Output == "-"
			if toStdout && opts.IO.IsStdoutTTY() && !opts.Exporter.Enabled() {
				return usageErrorf("refusing to write audio to a terminal: give -o FILE or redirect stdout")
			}
			var err error
			if opts.APIClient, err = e2e.clientFunc(f, cmd); err != nil {
				return err
			}
			if runF != nil {
				return runF(opts)
			}
			return f.explainAPIError(cmd, speakRun(cmd.Context(), opts))
		},
	}
	fl := cmd.Flags()
	fl.StringVarP(&opts.Model, "model", "m", "", "text-to-speech model (default: the fleet's first)")
	fl.StringVarP(&opts.Voice, "voice", "v", "", "one of the model's voices (default: its default voice)")
	fl.Float64Var(&opts.Speed, "speed", 0, "0.25 to 4 (default 1)")
	fl.StringVarP(&opts.Output, "output", "o", "", "write the WAV file here (default: stdout)")
	_ = cmd.RegisterFlagCompletionFunc("model", completeModels(f, api.CapSpeech))
	e2e = addE2EFlags(cmd, "reads the text")
	AddClientFlags(cmd)
	opts.Exporter.AddFlags(cmd, false)
	return cmd
}

func speakRun(ctx context.Context, opts *SpeakOptions) error {
	c, err := opts.APIClient()
	if err != nil {
		return err
	}
	model := opts.Model
	if model == "" {
		if model, err = firstModel(ctx, c, api.CapSpeech); err != nil {
			return err
		}
	}
	req := map[string]any{"model": model, "input": opts.Text, "response_format": api.AudioWAV}
	if opts.Voice != "" {
		req["voice"] = opts.Voice
	}
	if opts.Speed != 0 {
		req["speed"] = opts.Speed
	}
	sp, err := c.Speak(ctx, req)
	if err != nil {
		return err
	}
	toFile := opts.Output != "" && opts.Output != "-"
	if toFile {
		if err := writeFileAtomic(opts.Output, sp.Audio); err != nil {
			return err
		}
	} else if !opts.Exporter.Enabled() {
		_, err := opts.IO.Out.Write(sp.Audio)
		return err
	}
	if opts.Exporter.Enabled() {
		out := map[string]any{"model": model, "format": api.AudioWAV, "duration_ms": sp.DurationMs, "request_id": sp.RequestID,
			"worker": map[string]any{"id": sp.WorkerID, "name": sp.WorkerName}}
		if toFile {
			out["file"] = opts.Output
		} else {
			out["audio"] = sp.Audio // base64 in JSON
		}
		return opts.Exporter.Write(opts.IO.Out, out)
	}
	printf(opts.IO.ErrOut, "wrote %s: %.1f s of speech by %s on %s (request %s)\n",
		opts.Output, float64(sp.DurationMs)/1000, model, sp.WorkerName, sp.RequestID)
	return nil
}

// firstModel is the first model of the fleet with capability cp.
func firstModel(ctx context.Context, c *client.Client, cp string) (string, error) {
	models, err := c.Models(ctx)
	if err != nil {
		return "", err
	}
	for _, m := range models {
		if slices.Contains(m.Capabilities, cp) {
			return m.ID, nil
		}
	}
	return "", fmt.Errorf("no connected worker serves a %s model; give --model", cp)
}

// writeFileAtomic writes b to path through a temporary file, so a failure
// never leaves half a file behind.
func writeFileAtomic(path string, b []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
