package server

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/svc-dev/svc/internal/api"
)

func TestLateModerationBody(t *testing.T) {
	var b struct {
		Results []any `json:"results"`
		Detail  string
		Error   map[string]any
	}
	in := &api.Error{Kind: api.KindUnavailable, Code: api.CodeModerationUnavailable, Message: "down", RetryAfter: 1500 * time.Millisecond}
	if err := json.Unmarshal(inReplyError(in, formLateModeration), &b); err != nil {
		t.Fatal(err)
	}
	if b.Results != nil || b.Detail != "down" || b.Error["code"] != 503.0 || b.Error["moderation_code"] != "moderation_unavailable" || b.Error["retry_after"] != 2.0 {
		t.Fatalf("%+v", b)
	}
}
