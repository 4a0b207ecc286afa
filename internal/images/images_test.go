package images

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/svc-dev/svc/internal/api"
)

func TestParse(t *testing.T) {
	long := strings.Repeat("é", MaxPrompt+1)
	tests := []struct {
		name   string
		body   string
		want   Request
		status int
		field  string
	}{
		{"defaults", `{"model":"flux","prompt":"a fox"}`, Request{Model: "flux", Prompt: "a fox", N: 1, Size: "auto"}, 0, ""},
		{"everything", `{"model":"flux","prompt":"a fox","n":3,"size":"512x256","response_format":"b64_json","quality":"hd","style":"vivid","user":"u","seed":7}`,
			Request{Model: "flux", Prompt: "a fox", N: 3, Size: "512x256", Width: 512, Height: 256}, 0, ""},
		{"auto", `{"model":"flux","prompt":"a fox","size":"auto","n":10}`, Request{Model: "flux", Prompt: "a fox", N: 10, Size: "auto"}, 0, ""},
		{"nulls are absent", `{"model":"flux","prompt":"a fox","n":null,"size":null,"response_format":null}`, Request{Model: "flux", Prompt: "a fox", N: 1, Size: "auto"}, 0, ""},
		{"malformed", `{"model":`, Request{}, 400, ""},
		{"empty body", ``, Request{}, 400, ""},
		{"url", `{"model":"flux","prompt":"a fox","response_format":"url"}`, Request{}, 400, ""},
		{"not an object", `"x"`, Request{}, 422, "body"},
		{"no model", `{"prompt":"a fox"}`, Request{}, 422, "model"},
		{"no prompt", `{"model":"flux"}`, Request{}, 422, "prompt"},
		{"blank prompt", `{"model":"flux","prompt":"  "}`, Request{}, 422, "prompt"},
		{"prompt not a string", `{"model":"flux","prompt":["a"]}`, Request{}, 422, "prompt"},
		{"prompt too long", `{"model":"flux","prompt":"` + long + `"}`, Request{}, 422, "prompt"},
		{"n zero", `{"model":"flux","prompt":"a","n":0}`, Request{}, 422, "n"},
		{"n eleven", `{"model":"flux","prompt":"a","n":11}`, Request{}, 422, "n"},
		{"n a string", `{"model":"flux","prompt":"a","n":"2"}`, Request{}, 422, "n"},
		{"n a fraction", `{"model":"flux","prompt":"a","n":1.5}`, Request{}, 422, "n"},
		{"n a whole float", `{"model":"flux","prompt":"a fox","n":2.0}`, Request{Model: "flux", Prompt: "a fox", N: 2, Size: "auto"}, 0, ""},
		{"size one side", `{"model":"flux","prompt":"a","size":"1024"}`, Request{}, 422, "size"},
		{"size too small", `{"model":"flux","prompt":"a","size":"32x32"}`, Request{}, 422, "size"},
		{"size too large", `{"model":"flux","prompt":"a","size":"8192x1024"}`, Request{}, 422, "size"},
		{"size not numbers", `{"model":"flux","prompt":"a","size":"widexhigh"}`, Request{}, 422, "size"},
		{"size a number", `{"model":"flux","prompt":"a","size":1024}`, Request{}, 422, "size"},
		{"unknown format", `{"model":"flux","prompt":"a","response_format":"png"}`, Request{}, 422, "response_format"},
		{"quality not a string", `{"model":"flux","prompt":"a","quality":1}`, Request{}, 422, "quality"},
		{"streamed", `{"model":"flux","prompt":"a","stream":true,"partial_images":1}`, Request{}, 422, "stream"},
		{"stream not a boolean", `{"model":"flux","prompt":"a","stream":"yes"}`, Request{}, 422, "stream"},
		{"stream false", `{"model":"flux","prompt":"a fox","stream":false}`, Request{Model: "flux", Prompt: "a fox", N: 1, Size: "auto"}, 0, ""},
		// Validation comes first: a request with url and a missing prompt
		// is told of the prompt.
		{"url and no prompt", `{"model":"flux","response_format":"url"}`, Request{}, 422, "prompt"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := Parse([]byte(tt.body))
			if tt.status == 0 {
				if err != nil {
					t.Fatal(err)
				}
				if r.Model != tt.want.Model || r.Prompt != tt.want.Prompt || r.N != tt.want.N || r.Size != tt.want.Size ||
					r.Width != tt.want.Width || r.Height != tt.want.Height {
					t.Fatalf("Parse = %+v, want %+v", r, tt.want)
				}
				var sent map[string]any
				if err := json.Unmarshal(r.Body, &sent); err != nil || sent["n"] != float64(tt.want.N) || sent["response_format"] != "b64_json" || sent["prompt"] != tt.want.Prompt {
					t.Fatalf("body for the worker %s", r.Body)
				}
				return
			}
			var ae *api.Error
			if !errors.As(err, &ae) || ae.HTTPStatus() != tt.status {
				t.Fatalf("err = %v, want status %d", err, tt.status)
			}
			if tt.field != "" && (len(ae.Fields) == 0 || ae.Fields[0].Field != tt.field) {
				t.Fatalf("fields = %+v, want %s", ae.Fields, tt.field)
			}
		})
	}
}

// The 400 for url says why and what to send instead.
func TestParseRefusesURL(t *testing.T) {
	_, err := Parse([]byte(`{"model":"flux","prompt":"a fox","response_format":"url"}`))
	var ae *api.Error
	if !errors.As(err, &ae) || ae.HTTPStatus() != 400 || ae.Param != "response_format" || ae.Code != CodeURLNotSupported ||
		!strings.Contains(ae.Message, "b64_json") || ae.Type != "" && ae.Type != api.TypeInvalidRequest {
		t.Fatalf("err = %+v", ae)
	}
}

// Other fields reach the worker as they were sent.
func TestParseForwardsOtherFields(t *testing.T) {
	r, err := Parse([]byte(`{"model":"flux","prompt":"a <fox>","negative_prompt":"blur","seed":7,"extra":{"steps":[1,2]}}`))
	if err != nil {
		t.Fatal(err)
	}
	var sent map[string]any
	if err := json.Unmarshal(r.Body, &sent); err != nil || sent["negative_prompt"] != "blur" || sent["seed"] != 7.0 ||
		sent["extra"].(map[string]any)["steps"].([]any)[1] != 2.0 || sent["prompt"] != "a <fox>" {
		t.Fatalf("%s, %v", r.Body, err)
	}
}

func TestReply(t *testing.T) {
	svc := json.RawMessage(`{"worker":{"id":"wk_1"},"request_id":"r"}`)
	tests := []struct {
		name   string
		answer string
		n      int
		ok     bool
	}{
		{"two images", `{"created":1,"data":[{"b64_json":"aQ=="},{"b64_json":"aQ==","revised_prompt":"p"}],"usage":{"total_tokens":3}}`, 2, true},
		{"spaces", " {\"data\":[{\"b64_json\":\"aQ==\"}]}\n", 1, true},
		{"no images", `{"created":1,"data":[]}`, 0, true},
		{"no data", `{"created":1}`, 0, false},
		{"a url", `{"data":[{"url":"https://x/1.png"}]}`, 0, false},
		{"an empty image", `{"data":[{"b64_json":""}]}`, 0, false},
		{"not json", `<html>`, 0, false},
		{"not an object", `[{"b64_json":"aQ=="}]`, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, n, err := Reply([]byte(tt.answer), svc)
			if !tt.ok {
				if err == nil {
					t.Fatalf("Reply accepted %s", tt.answer)
				}
				return
			}
			var got map[string]json.RawMessage
			if err != nil || n != tt.n || json.Unmarshal(out, &got) != nil || string(got["svc"]) != string(svc) || got["data"] == nil {
				t.Fatalf("Reply = %s, %d, %v", out, n, err)
			}
		})
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{`{"model":"m","prompt":"p","n":2,"size":"256x256"}`, `{"size":"x"}`, `[`, `null`,
		`{"model":"m","prompt":"p","response_format":"url"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		r, err := Parse(body)
		if err == nil {
			if r.Model == "" || r.N < 1 || r.N > MaxImages || !json.Valid(r.Body) ||
				r.Size != "auto" && (r.Width < MinSide || r.Width > MaxSide || r.Height < MinSide || r.Height > MaxSide) {
				t.Fatalf("Parse(%q) = %+v", body, r)
			}
			return
		}
		var ae *api.Error
		if !errors.As(err, &ae) || (ae.HTTPStatus() != 400 && ae.HTTPStatus() != 422) || ae.Message == "" {
			t.Fatalf("Parse(%q) = %v", body, err)
		}
	})
}

func FuzzReply(f *testing.F) {
	for _, s := range []string{`{"data":[{"b64_json":"aQ=="}]}`, `{}`, `{"data":null}`, `{"data":[{}]}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, answer []byte) {
		out, n, err := Reply(answer, json.RawMessage(`{"request_id":"r"}`))
		if err != nil {
			return
		}
		var got struct {
			Data []json.RawMessage `json:"data"`
			Svc  json.RawMessage   `json:"svc"`
		}
		if json.Unmarshal(out, &got) != nil || len(got.Data) != n || string(got.Svc) != `{"request_id":"r"}` {
			t.Fatalf("Reply(%q) = %s, %d", answer, out, n)
		}
	})
}
