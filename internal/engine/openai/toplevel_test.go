package openai

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
	"unicode/utf8"

	"github.com/svc-dev/svc/internal/api"
)

func TestTopMembers(t *testing.T) {
	tests := []struct {
		in   string
		want []string // key=value pairs, nil when not ok
	}{
		{`{}`, []string{}},
		{` { "a" : 1 , "b":"x,}]" ,"c":{"d":[1,{"e":"}"}]},"f":null } `, []string{`a=1`, `b="x,}]"`, `c={"d":[1,{"e":"}"}]}`, `f=null`}},
		{`{"s":"a\"b\\","n":-1.5e3,"t":true}`, []string{`s="a\"b\\"`, `n=-1.5e3`, `t=true`}},
		{`{"a":[],"a":[1]}`, []string{`a=[]`, `a=[1]`}},
		{`{"\u0061":1}`, nil}, // an escaped key: left to encoding/json
		{`[1,2]`, nil},
		{`null`, nil},
		{`"x"`, nil},
	}
	for _, tt := range tests {
		var got []string
		ok := topMembers([]byte(tt.in), func(k, v []byte) bool {
			got = append(got, string(k)+"="+string(v))
			return true
		})
		if tt.want == nil {
			if ok {
				t.Errorf("%s: ok, want not ok (got %q)", tt.in, got)
			}
			continue
		}
		if got == nil {
			got = []string{}
		}
		if !ok || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%s: %q, %v; want %q", tt.in, got, ok, tt.want)
		}
	}
}

// FuzzTopMembers checks the single-pass reader against encoding/json on
// every valid object: the same members with the same values.
func FuzzTopMembers(f *testing.F) {
	for _, s := range []string{`{}`, `{"a":1,"b":[{"c":"}"}]}`, `{"a" : "\"" , "b":null}`, vllmPlainCompletion, llamaCompletion} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		// encoding/json replaces invalid UTF-8 in keys; the reader keeps
		// the bytes. Neither can then match the ASCII keys it looks for.
		if !json.Valid(in) || !utf8.Valid(in) {
			return
		}
		got := map[string]json.RawMessage{}
		ok := topMembers(in, func(k, v []byte) bool {
			got[string(k)] = v
			return true
		})
		var want map[string]json.RawMessage
		if json.Unmarshal(in, &want) != nil || want == nil {
			if ok {
				t.Fatalf("%q: read as an object", in)
			}
			return
		}
		if !ok {
			if !bytes.Contains(in, []byte(`\`)) {
				t.Fatalf("%q: not read", in)
			}
			return
		}
		if len(got) != len(want) {
			t.Fatalf("%q: %d members, want %d", in, len(got), len(want))
		}
		for k, v := range want {
			if !bytes.Equal(bytes.TrimSpace(got[k]), bytes.TrimSpace(v)) {
				t.Fatalf("%q: %s = %s, want %s", in, k, got[k], v)
			}
		}
	})
}

// FuzzNormaliseCompletion checks that the one-pass reading of a
// completion that needs no change agrees with the general path.
func FuzzNormaliseCompletion(f *testing.F) {
	for _, s := range []string{vllmPlainCompletion, vllmCompletion, llamaCompletion,
		`{"error":{"message":"x","code":429}}`, `{"choices":[],"usage":null}`, `{"choices":null,"error":null}`, `{}`, `null`, `[]`,
		// Not JSON, which the one pass must see as json.Valid would.
		`{"choices":[],"usage":{}} x`, `{"choices":[01]}`, `{"choices":[1,]}`, "{\"choices\":\"\x01\"}",
		`{"choices":[],"usage":{"prompt_tokens":1}`, `{"choi\u0063es":[]}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		var fast, general stats
		outF, resF := normaliseCompletion(in, &fast)
		outG, resG := normaliseGeneral(in, &general)
		if (resF == nil) != (resG == nil) || (resF != nil && resF.Status != resG.Status) {
			t.Fatalf("%q: results %+v and %+v", in, resF, resG)
		}
		if resF != nil {
			return
		}
		if !bytes.Equal(outF, outG) {
			t.Fatalf("%q: bodies %q and %q", in, outF, outG)
		}
		if !reflect.DeepEqual(fast, general) {
			t.Fatalf("%q: stats %+v and %+v", in, fast, general)
		}
	})
}

func BenchmarkNormaliseCompletion(b *testing.B) {
	body := []byte(vllmPlainCompletion)
	for _, bc := range []struct {
		name string
		f    func([]byte, *stats) ([]byte, *api.Result)
	}{{"one-pass", normaliseCompletion}, {"general", normaliseGeneral}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				var st stats
				bc.f(body, &st)
			}
		})
	}
}
