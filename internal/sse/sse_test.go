package sse

import (
	"bytes"
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"
	"testing/iotest"
)

// readAll collects every event up to the first error.
func readAll(r io.Reader, max int) ([]Event, error) {
	rd := NewReader(r, max)
	var out []Event
	for {
		ev, err := rd.Next()
		if err != nil {
			return out, err
		}
		out = append(out, ev)
	}
}

func ev(typ, data string) Event { return Event{Type: typ, Data: []byte(data)} }

func TestSSEReader(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want []Event
	}{
		{"single", "data: a\n\n", []Event{ev("", "a")}},
		{"two", "data: a\n\ndata: b\n\n", []Event{ev("", "a"), ev("", "b")}},
		{"multi-line data", "data: a\ndata: b\n\n", []Event{ev("", "a\nb")}},
		{"one space stripped", "data:a\n\ndata:  b\n\n", []Event{ev("", "a"), ev("", " b")}},
		{"colons in value", "data: {\"a\":\"b:c\"}\n\n", []Event{ev("", `{"a":"b:c"}`)}},
		{"comments", ": keep-alive\ndata: x\n: mid\n\n", []Event{ev("", "x")}},
		{"CRLF", "data: x\r\n\r\ndata: y\r\n\r\n", []Event{ev("", "x"), ev("", "y")}},
		{"CR", "data: x\r\rdata: y\r\r", []Event{ev("", "x"), ev("", "y")}},
		{"mixed line ends", "data: x\r\n\ndata: y\n\r\n", []Event{ev("", "x"), ev("", "y")}},
		{"missing final blank line", "data: x\n", []Event{ev("", "x")}},
		{"truncated last line dropped", "data: x\n\ndata: {\"id\"", []Event{ev("", "x")}},
		{"truncated only line", "data: [DONE]", nil},
		{"event type", "event: ping\ndata: 1\n\ndata: 2\n\n", []Event{ev("ping", "1"), ev("", "2")}},
		{"event without data dropped", "event: a\n\ndata: 2\n\n", []Event{ev("", "2")}},
		{"llama.cpp error field", "error: {\"code\":500}\n\n", []Event{ev("error", `{"code":500}`)}},
		{"id and retry ignored", "id: 5\nretry: 100\ndata: x\n\n", []Event{ev("", "x")}},
		{"unknown field ignored", "foo: bar\ndata: x\n\n", []Event{ev("", "x")}},
		{"data without colon", "data\n\n", []Event{ev("", "")}},
		{"blank lines only", "\n\n\r\n", nil},
		{"empty", "", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for name, r := range map[string]io.Reader{
				"whole":    strings.NewReader(tt.in),
				"one byte": iotest.OneByteReader(strings.NewReader(tt.in)),
				"half":     iotest.HalfReader(strings.NewReader(tt.in)),
			} {
				got, err := readAll(r, 1<<10)
				if err != io.EOF {
					t.Fatalf("%s: err = %v, want EOF", name, err)
				}
				if !reflect.DeepEqual(normalise(got), normalise(tt.want)) {
					t.Fatalf("%s: got %q, want %q", name, got, tt.want)
				}
			}
		})
	}
}

func TestSSEReaderLimits(t *testing.T) {
	tests := map[string]string{
		"huge line":          "data: " + strings.Repeat("x", 100) + "\n\n",
		"huge line, no end":  "data: " + strings.Repeat("x", 100),
		"many lines":         strings.Repeat("data: xxxxxxxxxx\n", 10) + "\n",
		"huge comment":       ":" + strings.Repeat("x", 100) + "\n",
		"CR then huge value": "data: a\r" + strings.Repeat("y", 100),
	}
	for name, in := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := readAll(iotest.HalfReader(strings.NewReader(in)), 64)
			if !errors.Is(err, errEventTooLarge) {
				t.Fatalf("err = %v (events %q), want errEventTooLarge", err, got)
			}
		})
	}
	// Exactly at the limit is fine.
	in := "data: " + strings.Repeat("x", 64-len("data: ")-1) + "\n\n"
	if got, err := readAll(strings.NewReader(in), 64); err != io.EOF || len(got) != 1 {
		t.Fatalf("got %q, %v", got, err)
	}
}

func TestSSEReaderError(t *testing.T) {
	boom := errors.New("connection reset")
	r := io.MultiReader(strings.NewReader("data: a\n\ndata: b\n"), iotest.ErrReader(boom))
	got, err := readAll(r, 1<<10)
	if !errors.Is(err, boom) {
		t.Fatalf("err = %v, want %v", err, boom)
	}
	// The event that had no blank line yet is lost with the connection.
	if !reflect.DeepEqual(got, []Event{ev("", "a")}) {
		t.Fatalf("got %q", got)
	}
}

// refEvents is a deliberately simple reading of the same rules, over a
// complete input, for the fuzz test to compare against.
func refEvents(in []byte) []Event {
	var lines [][]byte
	for {
		i := bytes.IndexAny(in, "\r\n")
		if i < 0 {
			break // an unterminated last line is dropped
		}
		lines = append(lines, in[:i])
		if in[i] == '\r' && i+1 < len(in) && in[i+1] == '\n' {
			i++
		}
		in = in[i+1:]
	}
	var (
		out   []Event
		typ   string
		data  [][]byte
		dirty bool
	)
	flush := func() {
		if dirty {
			out = append(out, Event{Type: typ, Data: bytes.Join(data, []byte("\n"))})
		}
		typ, data, dirty = "", nil, false
	}
	for _, l := range lines {
		if len(l) == 0 {
			flush()
			continue
		}
		if l[0] == ':' {
			continue
		}
		name, value := l, []byte{}
		if i := bytes.IndexByte(l, ':'); i >= 0 {
			name, value = l[:i], bytes.TrimPrefix(l[i+1:], []byte(" "))
		}
		switch string(name) {
		case "data":
			data, dirty = append(data, value), true
		case "event":
			typ = string(value)
		case "error":
			typ, data, dirty = "error", append(data, value), true
		}
	}
	flush()
	return out
}

func normalise(evs []Event) []Event {
	for i := range evs {
		if evs[i].Data == nil {
			evs[i].Data = []byte{}
		}
	}
	return evs
}

// FuzzSSEReader checks the reader against refEvents, and that how the
// input is split into reads never matters, limits included.
func FuzzSSEReader(f *testing.F) {
	for _, s := range []string{
		"data: a\n\n", "data: a\ndata: b\n\n", ": c\ndata: x\r\n\r\n", "data: x\r\rdata: y\r",
		"event: e\ndata: 1\n\n", "error: {\"code\":500}\n\n", "data: x\n", "data: x", "data\n\n",
		"data: " + `{"id":"x","choices":[{"index":0,"delta":{"content":"hi"}}]}` + "\n\ndata: [DONE]\n\n", "\r\n\r\n\n", "id: 1\nretry: 5\n\n", "data:\ndata:\n\n",
		"data: " + strings.Repeat("z", 300) + "\n\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		if len(in) > 1<<15 {
			return
		}
		got, err := readAll(bytes.NewReader(in), 1<<16)
		if err != io.EOF {
			t.Fatalf("err = %v", err)
		}
		if want := refEvents(in); !reflect.DeepEqual(normalise(got), normalise(want)) {
			t.Fatalf("input %q:\n got %q\nwant %q", in, got, want)
		}
		oneByte, err := readAll(iotest.OneByteReader(bytes.NewReader(in)), 1<<16)
		if err != io.EOF || !reflect.DeepEqual(normalise(oneByte), normalise(got)) {
			t.Fatalf("byte-wise read of %q: %q, %v; whole: %q", in, oneByte, err, got)
		}

		// With a small limit, oversized input fails the same way however
		// it arrives, and no event is ever larger than the limit.
		const small = 32
		a, errA := readAll(bytes.NewReader(in), small)
		b, errB := readAll(iotest.HalfReader(bytes.NewReader(in)), small)
		if errors.Is(errA, errEventTooLarge) != errors.Is(errB, errEventTooLarge) || !reflect.DeepEqual(normalise(a), normalise(b)) {
			t.Fatalf("limit depends on reads for %q: %q %v / %q %v", in, a, errA, b, errB)
		}
		for _, e := range a {
			if len(e.Data) > small {
				t.Fatalf("event of %d bytes over limit %d", len(e.Data), small)
			}
		}
	})
}
