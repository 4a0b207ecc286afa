package chat

import (
	"encoding/json"
	"testing"
)

func TestStreamSvc(t *testing.T) {
	tests := []struct {
		name   string
		chunks []string // each chunk's svc member
		steps  []string // what Add gives back, one for each chunk
		want   string
	}{
		{"nothing", []string{`null`, `5`, `"x"`, `{"a":`}, []string{"", "", "", ""}, ``},
		{"members merged in their first place", []string{`{"notice":{"code":"a"}}`, `{"worker":{"id":"w"}, "notice":{"code":"b"}}`},
			[]string{"", ""}, `{"notice":{"code":"b"},"worker":{"id":"w"}}`},
		{"steps gathered, each end replacing its start", []string{
			`{"web_tool_step":{"index":0,"name":"web_search"}}`,
			`{"web_tool_step":{"index":0,"name":"web_search","ok":true}}`,
			`{"web_tool_step":{"index":1,"name":"web_fetch"}}`,
			`{"worker":{"id":"w"},"request_id":"r"}`,
		}, []string{`{"index":0,"name":"web_search"}`, `{"index":0,"name":"web_search","ok":true}`, `{"index":1,"name":"web_fetch"}`, ""},
			`{"worker":{"id":"w"},"request_id":"r","web_tool_steps":[{"index":0,"name":"web_search","ok":true},{"index":1,"name":"web_fetch"}]}`},
		{"a step without an index kept as it came", []string{`{"web_tool_step":{"name":"x"}}`, `{"web_tool_step":{"name":"x"}}`},
			[]string{`{"name":"x"}`, `{"name":"x"}`}, `{"web_tool_steps":[{"name":"x"},{"name":"x"}]}`},
		{"a whole list beside the events gives way to them", []string{`{"web_tool_steps":[1]}`, `{"web_tool_step":{"index":0}}`},
			[]string{"", `{"index":0}`}, `{"web_tool_steps":[{"index":0}]}`},
		{"a whole list alone is kept", []string{`{"web_tool_steps":[{"index":0}]}`}, []string{""}, `{"web_tool_steps":[{"index":0}]}`},
		{"a step that is not an object is a member", []string{`{"web_tool_step":3}`}, []string{""}, `{"web_tool_step":3}`},
		{"space compacted", []string{"{ \"a\" : [ 1 , 2 ] }"}, []string{""}, `{"a":[1,2]}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var s StreamSvc
			for i, c := range tt.chunks {
				raw := []byte(c)
				step := s.Add(raw)
				if string(step) != tt.steps[i] {
					t.Errorf("chunk %d gave step %s, want %s", i, step, tt.steps[i])
				}
				for j := range raw {
					raw[j] = 'x' // the chunk's buffer is reused
				}
			}
			got := s.JSON()
			if string(got) != tt.want {
				t.Fatalf("got %s\nwant %s", got, tt.want)
			}
			if got != nil && !json.Valid(got) {
				t.Fatalf("not JSON: %s", got)
			}
		})
	}
}
