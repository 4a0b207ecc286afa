package api

import "testing"

func TestPath(t *testing.T) {
	var body *Path
	messages := body.Key("messages")
	block := messages.Index(2).Key("content").Index(0)
	for _, tc := range []struct {
		p    *Path
		want string
	}{
		{body, ""},
		{&Path{}, ""},
		{messages, "messages"},
		{messages.Index(2), "messages.2"},
		{messages.Index(2).Key("content"), "messages.2.content"},
		{block, "messages.2.content.0"},
		{block.Key("text"), "messages.2.content.0.text"},
		{block.Key(""), "messages.2.content.0"},
		{body.Index(3), "3"},
		{body.Index(3).Index(1), "3.1"},
		{PathOf("model"), "model"},
		{PathOf("output_config").Key("format"), "output_config.format"},
		{PathOf("").Key("model"), "model"},
	} {
		if got := tc.p.String(); got != tc.want {
			t.Errorf("String() = %q, want %q", got, tc.want)
		}
	}
}

// descend checks a value the way a request's check does: a path for each
// level, spelled out only on a failure.
//
//go:noinline
func descend(p *Path, depth int, fail bool) string {
	if depth == 0 {
		if fail {
			return p.String()
		}
		return ""
	}
	return descend(p.Index(depth).Key("content"), depth-1, fail)
}

func TestPathBuildsNothingUntilSpelled(t *testing.T) {
	if n := testing.AllocsPerRun(100, func() { descend(PathOf("messages"), 6, false) }); n != 0 {
		t.Errorf("descending six levels allocated %v times, want none", n)
	}
	if got, want := descend(PathOf("messages"), 2, true), "messages.2.content.1.content"; got != want {
		t.Errorf("descend = %q, want %q", got, want)
	}
}

func TestValidatorAddAt(t *testing.T) {
	var v Validator
	v.AddAt(PathOf("messages").Index(1).Key("role"), FieldEnum, "one of %s", "user")
	v.AddAt(nil, FieldWrongType, "must be a JSON object")
	if len(v.fields) != 2 || v.fields[0] != (FieldError{Field: "messages.1.role", Type: FieldEnum, Message: "one of user"}) ||
		v.fields[1].Field != "" {
		t.Fatalf("fields %+v", v.fields)
	}
}
