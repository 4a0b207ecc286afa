package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"reflect"
	"text/tabwriter"
	"time"

	"github.com/svc-dev/svc/internal/termsafe"
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

// fields writes "label  value" lines aligned. The values are escaped
// (termsafe.Line): most are the server's.
func fields(w io.Writer, pairs ...[2]string) error { return styledFields(w, nil, pairs...) }

// styledFields is fields with colour: style, by label, is applied to a
// value once it is escaped, so that only its own escapes reach the
// terminal. It may add to the value too: a bar after a sum.
func styledFields(w io.Writer, style map[string]func(string) string, pairs ...[2]string) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, p := range pairs {
		v := termsafe.Line(p[1])
		if s := style[p[0]]; s != nil {
			v = s(v)
		}
		fmt.Fprintf(tw, "%s\t%s\n", p[0], v)
	}
	return tw.Flush()
}

// printf is fmt.Fprintf for a message that quotes the server: its string
// and error arguments are escaped (termsafe.Line), its format is not.
func printf(w io.Writer, format string, args ...any) (int, error) {
	safe := make([]any, len(args))
	for i, a := range args {
		switch v := a.(type) {
		case error:
			safe[i] = termsafe.Line(v.Error())
		default:
			if rv := reflect.ValueOf(a); rv.Kind() == reflect.String {
				// Named string types too: api.Plan, a status.
				safe[i] = termsafe.Line(rv.String())
			} else {
				safe[i] = a
			}
		}
	}
	return fmt.Fprintf(w, format, safe...)
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
