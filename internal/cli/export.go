package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"

	"github.com/itchyny/gojq"
	"github.com/spf13/cobra"
)

// Exporter is --json and --jq, shared by every command that prints API data,
// so they all behave alike: --json writes the API's JSON document and --jq
// filters it (and implies --json).
type Exporter struct {
	JSON bool
	JQ   string

	code *gojq.Code
}

const jqHelp = "filter the JSON with a jq expression; strings print raw (implies --json)"

// AddFlags adds --json and --jq to cmd: persistent ones for a group whose
// every subcommand prints data.
func (e *Exporter) AddFlags(cmd *cobra.Command, persistent bool) {
	fl := cmd.Flags()
	if persistent {
		fl = cmd.PersistentFlags()
	}
	fl.BoolVar(&e.JSON, "json", false, "print the API's JSON")
	fl.StringVar(&e.JQ, "jq", "", jqHelp)
}

// Enabled reports whether JSON output was asked for.
func (e *Exporter) Enabled() bool { return e.JSON || e.JQ != "" }

// Prepare compiles the --jq expression, so a bad one is a usage error
// before any request is sent.
func (e *Exporter) Prepare() error {
	if e.JQ == "" || e.code != nil {
		return nil
	}
	q, err := gojq.Parse(e.JQ)
	if err != nil {
		return usageErrorf("invalid --jq expression: %v", err)
	}
	if e.code, err = gojq.Compile(q); err != nil {
		return usageErrorf("invalid --jq expression: %v", err)
	}
	return nil
}

// Write prints v (a value of the api types, or a json.RawMessage of the
// server's reply) as one indented JSON document, or each result of the jq
// expression: strings raw as `jq -r` prints them, anything else as JSON.
func (e *Exporter) Write(w io.Writer, v any) error {
	if e.JQ == "" {
		return printJSON(w, v)
	}
	if err := e.Prepare(); err != nil {
		return err
	}
	doc, err := toGeneric(v)
	if err != nil {
		return err
	}
	iter := e.code.Run(doc)
	for {
		r, ok := iter.Next()
		if !ok {
			return nil
		}
		if err, ok := r.(error); ok {
			return fmt.Errorf("jq: %w", err)
		}
		if s, ok := r.(string); ok {
			if _, err := fmt.Fprintln(w, s); err != nil {
				return err
			}
			continue
		}
		b, err := gojq.Marshal(r)
		if err != nil {
			return fmt.Errorf("jq: %w", err)
		}
		var out bytes.Buffer
		if err := json.Indent(&out, b, "", "  "); err != nil {
			return fmt.Errorf("jq: %w", err)
		}
		out.WriteByte('\n')
		if _, err := w.Write(out.Bytes()); err != nil {
			return err
		}
	}
}

// toGeneric turns v into the maps, slices and numbers jq works on. Numbers
// stay json.Number so large integers survive exactly.
func toGeneric(v any) (any, error) {
	raw, ok := v.(json.RawMessage)
	if !ok {
		var err error
		if raw, err = json.Marshal(v); err != nil {
			return nil, fmt.Errorf("encode JSON: %w", err)
		}
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var doc any
	if err := dec.Decode(&doc); err != nil {
		return nil, fmt.Errorf("decode JSON: %w", err)
	}
	return doc, nil
}
