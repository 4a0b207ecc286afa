package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"
	"time"
)

// printJSON writes v as indented JSON: the API's own field names, one
// document, for scripts and jq.
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	// Scripts read this, not browsers: keep <, > and & as they are.
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// fields writes "label  value" lines aligned.
func fields(w io.Writer, pairs ...[2]string) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, p := range pairs {
		fmt.Fprintf(tw, "%s\t%s\n", p[0], p[1])
	}
	return tw.Flush()
}

func fmtTime(t time.Time) string { return t.UTC().Format(time.RFC3339) }

func fmtTimePtr(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return fmtTime(*t)
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}
