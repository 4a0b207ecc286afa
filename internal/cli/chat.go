package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/client"
	"github.com/svc-dev/svc/internal/iostreams"
)

// ChatOptions are the arguments and flags of `svc chat`.
type ChatOptions struct {
	IO        *iostreams.IOStreams
	APIClient func() (*client.Client, error)
	Exporter  Exporter

	Model  string
	Prompt string // the argument and stdin, joined
	System string
	// MaxTokens and Temperature are nil when not given, so the gateway's
	// and the model's defaults apply.
	MaxTokens   *int
	Temperature *float64
	NoStream    bool
}

// NewCmdChat builds `svc chat`.
func NewCmdChat(f *Factory, runF func(*ChatOptions) error) *cobra.Command {
	opts := &ChatOptions{IO: f.IO}
	var e2e *e2eFlags
	var maxTokens int
	var temperature float64
	cmd := &cobra.Command{
		Use:   "chat MODEL [PROMPT]",
		Short: "Send a chat completion and print the answer as it arrives",
		Long: `Send PROMPT to MODEL and stream the answer to stdout as it arrives, ending
with a newline. When stdin is not a terminal it is read as well: it is the
prompt when PROMPT is not given, and is appended to PROMPT after a blank line
when it is.

Reasoning models' thinking is shown dimmed before the answer when stdout is a
terminal with colour, and not printed otherwise. A notice about the reply
(svc.notice, e.g. an answer cut at the token cap) is printed to stderr.

--json prints the gateway's whole non-streaming reply instead (usage, timing,
the serving worker); --jq filters it.

` + clientHelp,
		Example: `  svc chat sim-chat "Hello!"
  git diff | svc chat qwen3-32b "Review this change:"
  svc chat sim-reasoner --max-tokens 200 --system "Answer briefly." "Why is the sky blue?"
  svc chat sim-chat hi --jq .usage.total_tokens`,
		GroupID:           groupClient,
		Args:              rangeArgs(1, 2),
		ValidArgsFunction: completeModels(f, api.CapChat),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Model = args[0]
			var parts []string
			if len(args) == 2 && strings.TrimSpace(args[1]) != "" {
				parts = append(parts, args[1])
			}
			if !opts.IO.IsStdinTTY() {
				b, err := io.ReadAll(opts.IO.In)
				if err != nil {
					return fmt.Errorf("read the prompt from stdin: %w", err)
				}
				if s := strings.TrimSpace(string(b)); s != "" {
					parts = append(parts, s)
				}
			}
			if len(parts) == 0 {
				return usageErrorf("no prompt: give PROMPT or pipe one on stdin")
			}
			opts.Prompt = strings.Join(parts, "\n\n")
			opts.MaxTokens, opts.Temperature = nil, nil
			if cmd.Flags().Changed("max-tokens") {
				if maxTokens < 1 {
					return usageErrorf("--max-tokens must be at least 1, got %d", maxTokens)
				}
				opts.MaxTokens = &maxTokens
			}
			if cmd.Flags().Changed("temperature") {
				if !(temperature >= 0 && temperature <= 2) { // NaN too
					return usageErrorf("--temperature must be between 0 and 2, got %g", temperature)
				}
				opts.Temperature = &temperature
			}
			if err := opts.Exporter.Prepare(); err != nil {
				return err
			}
			var err error
			if opts.APIClient, err = e2e.clientFunc(f, cmd); err != nil {
				return err
			}
			if runF != nil {
				return runF(opts)
			}
			return f.explainAPIError(cmd, chatRun(cmd.Context(), opts))
		},
	}
	AddClientFlags(cmd)
	fl := cmd.Flags()
	fl.StringVar(&opts.System, "system", "", "a system message sent before the prompt")
	fl.IntVar(&maxTokens, "max-tokens", 0, "cap the answer at N tokens (default: the gateway's cap)")
	fl.Float64Var(&temperature, "temperature", 0, "sampling temperature, 0-2 (default: the model's)")
	fl.BoolVar(&opts.NoStream, "no-stream", false, "wait for the whole answer instead of streaming it")
	e2e = addE2EFlags(cmd, "reads it")
	fl.BoolVar(&opts.Exporter.JSON, "json", false, "print the gateway's whole reply as JSON (not streamed)")
	fl.StringVar(&opts.Exporter.JQ, "jq", "", jqHelp)
	return cmd
}

// chatRequest is what `svc chat` sends.
type chatRequest struct {
	Model       string        `json:"model"`
	Messages    []chatMessage `json:"messages"`
	Stream      bool          `json:"stream,omitempty"`
	MaxTokens   *int          `json:"max_tokens,omitempty"`
	Temperature *float64      `json:"temperature,omitempty"`
}

type chatMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

func (o *ChatOptions) request(stream bool) chatRequest {
	req := chatRequest{Model: o.Model, Stream: stream, MaxTokens: o.MaxTokens, Temperature: o.Temperature}
	if o.System != "" {
		req.Messages = append(req.Messages, chatMessage{Role: "system", Content: o.System})
	}
	req.Messages = append(req.Messages, chatMessage{Role: "user", Content: o.Prompt})
	return req
}

// chatText is what `svc chat` reads of a reply or a chunk: the first
// choice's text and thinking, and the svc notice.
type chatText struct {
	Choices []struct {
		Message *chatParts `json:"message"`
		Delta   *chatParts `json:"delta"`
	} `json:"choices"`
	Svc *struct {
		Notice *api.Notice `json:"notice"`
	} `json:"svc"`
}

type chatParts struct {
	Content          string `json:"content"`
	ReasoningContent string `json:"reasoning_content"`
	Reasoning        string `json:"reasoning"`
}

// reasoning is the thinking text, under either field name engines use.
func (p *chatParts) reasoning() string {
	if p.ReasoningContent != "" {
		return p.ReasoningContent
	}
	return p.Reasoning
}

func chatRun(ctx context.Context, opts *ChatOptions) error {
	c, err := opts.APIClient()
	if err != nil {
		return err
	}
	if opts.Exporter.Enabled() {
		raw, err := c.Chat(ctx, opts.request(false))
		if err != nil {
			return err
		}
		return opts.Exporter.Write(opts.IO.Out, raw)
	}
	w := &answerWriter{out: opts.IO.Out, showReasoning: opts.IO.ColorEnabled()}
	var notice *api.Notice
	take := func(t chatText) error {
		if t.Svc != nil && t.Svc.Notice != nil {
			notice = t.Svc.Notice
		}
		if len(t.Choices) == 0 {
			return nil
		}
		p := t.Choices[0].Delta
		if p == nil {
			p = t.Choices[0].Message
		}
		if p == nil {
			return nil
		}
		if err := w.reasoning(p.reasoning()); err != nil {
			return err
		}
		return w.content(p.Content)
	}
	if opts.NoStream {
		// err is the one checked after both branches: declaring a new one
		// here would lose the error of writing the answer.
		var raw json.RawMessage
		if raw, err = c.Chat(ctx, opts.request(false)); err != nil {
			return err
		}
		var t chatText
		if err := json.Unmarshal(raw, &t); err != nil {
			return fmt.Errorf("decode the reply: %w", err)
		}
		err = take(t)
	} else {
		err = c.ChatStream(ctx, opts.request(true), func(chunk json.RawMessage) error {
			var t chatText
			if err := json.Unmarshal(chunk, &t); err != nil {
				return fmt.Errorf("decode a chunk: %w", err)
			}
			return take(t)
		})
	}
	if err != nil {
		// A stream that broke off still ends its line, so the error
		// printed next starts on a fresh one.
		if w.wrote {
			_ = w.finish()
		}
		return err
	}
	if err := w.finish(); err != nil {
		return err
	}
	if notice != nil {
		printf(opts.IO.ErrOut, "Notice (%s): %s\n", notice.Code, notice.Message)
	}
	return nil
}

// answerWriter prints an answer as it arrives: thinking dimmed (when it is
// shown at all), a blank line, then the text.
type answerWriter struct {
	out           io.Writer
	showReasoning bool
	inReasoning   bool
	wrote         bool
	last          byte
}

func (w *answerWriter) write(s string) error {
	if s == "" {
		return nil
	}
	w.wrote, w.last = true, s[len(s)-1]
	_, err := io.WriteString(w.out, s)
	return err
}

func (w *answerWriter) reasoning(s string) error {
	if s == "" || !w.showReasoning {
		return nil
	}
	w.inReasoning = true
	if err := w.write(colorScheme{true}.faint(s)); err != nil {
		return err
	}
	w.last = s[len(s)-1]
	return nil
}

func (w *answerWriter) content(s string) error {
	if s == "" {
		return nil
	}
	if w.inReasoning {
		w.inReasoning = false
		sep := "\n\n"
		if w.last == '\n' {
			sep = "\n"
		}
		if err := w.write(sep); err != nil {
			return err
		}
	}
	return w.write(s)
}

// finish ends the answer with a newline; an empty answer is one too.
func (w *answerWriter) finish() error {
	if !w.wrote || w.last != '\n' {
		return w.write("\n")
	}
	return nil
}

// rangeArgs wants between lo and hi positional arguments.
func rangeArgs(lo, hi int) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) < lo || len(args) > hi {
			return usageErrorf("%s takes %d to %d arguments, got %d: %s", cmd.CommandPath(), lo, hi, len(args), cmd.Use)
		}
		return nil
	}
}
