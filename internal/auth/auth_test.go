package auth

import (
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/svc-dev/svc/internal/api"
)

func TestNewCredentialParses(t *testing.T) {
	for _, kind := range []Kind{KindAPIKey, KindWorkerToken} {
		c := NewCredential(kind)
		gotKind, id, ok := Parse(c.Secret)
		if !ok || gotKind != kind || id != c.ID {
			t.Fatalf("Parse(%q) = %q, %q, %v; want %q, %q, true", c.Secret, gotKind, id, ok, kind, c.ID)
		}
		if !c.Hash.Matches(c.Secret) {
			t.Fatalf("hash of %q does not match itself", c.Secret)
		}
		if strings.Contains(PrefixOf(kind, c.ID), c.Secret[len(kind)+idLen+1:]) {
			t.Fatal("prefix reveals the secret part")
		}
	}
}

func TestCredentialsAreDistinct(t *testing.T) {
	seen := map[string]bool{}
	for range 1000 {
		c := NewCredential(KindAPIKey)
		if seen[c.ID] {
			t.Fatalf("duplicate id %q", c.ID)
		}
		seen[c.ID] = true
	}
}

func TestHashMatches(t *testing.T) {
	c := NewCredential(KindAPIKey)
	tests := []struct {
		name   string
		secret string
		want   bool
	}{
		{"same", c.Secret, true},
		{"empty", "", false},
		{"last char changed", c.Secret[:len(c.Secret)-1] + flip(c.Secret[len(c.Secret)-1]), false},
		{"truncated", c.Secret[:len(c.Secret)-1], false},
		{"extended", c.Secret + "x", false},
		{"other key", NewCredential(KindAPIKey).Secret, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := c.Hash.Matches(tt.secret); got != tt.want {
				t.Fatalf("Matches = %v, want %v", got, tt.want)
			}
		})
	}
}

func flip(b byte) string {
	if b == 'a' {
		return "b"
	}
	return "a"
}

func TestParseRejects(t *testing.T) {
	good := NewCredential(KindAPIKey).Secret
	tests := []struct {
		name, in string
	}{
		{"empty", ""},
		{"no prefix", good[len(KindAPIKey):]},
		{"foreign prefix", "sk-" + good[len(KindAPIKey):]},
		{"short", good[:len(good)-1]},
		{"long", good + "a"},
		{"missing separator", strings.Replace(good, "_", "", 3)},
		{"bad char in id", string(KindAPIKey) + "!" + good[len(KindAPIKey)+1:]},
		{"bad char in secret", good[:len(good)-1] + "-"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, _, ok := Parse(tt.in); ok {
				t.Fatalf("Parse(%q) accepted", tt.in)
			}
		})
	}
}

func FuzzParse(f *testing.F) {
	f.Add(NewCredential(KindAPIKey).Secret)
	f.Add(NewCredential(KindWorkerToken).Secret)
	f.Add("svc_k_")
	f.Fuzz(func(t *testing.T, s string) {
		kind, id, ok := Parse(s)
		if !ok {
			return
		}
		if !strings.HasPrefix(s, string(kind)+id+"_") || len(id) != idLen {
			t.Fatalf("Parse(%q) = %q, %q", s, kind, id)
		}
	})
}

func TestPrincipalRequire(t *testing.T) {
	tests := []struct {
		name string
		p    Principal
		perm Permission
		ok   bool
	}{
		{"granted", Principal{Permissions: []Permission{UsageRead}}, UsageRead, true},
		{"missing", Principal{Permissions: []Permission{UsageRead}}, WorkersRead, false},
		{"none", Principal{}, InferenceWrite, false},
		{"unrestricted", Principal{Unrestricted: true}, ComputeWrite, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.p.Require(tt.perm)
			if tt.ok {
				if err != nil {
					t.Fatalf("Require(%s) = %v", tt.perm, err)
				}
				return
			}
			var ae *api.Error
			if !errors.As(err, &ae) || ae.HTTPStatus() != http.StatusForbidden {
				t.Fatalf("Require(%s) = %v, want a 403", tt.perm, err)
			}
			if !strings.Contains(ae.Message, string(tt.perm)) {
				t.Fatalf("message %q does not name %s", ae.Message, tt.perm)
			}
		})
	}
}

func TestRequireOperator(t *testing.T) {
	for _, r := range Roles() {
		p := Principal{Role: r}
		err := p.RequireOperator("rent GPUs")
		if (err == nil) != (r != RoleMember) {
			t.Errorf("role %s: RequireOperator = %v", r, err)
		}
	}
}

func TestParsePermissions(t *testing.T) {
	var v api.Validator
	got := ParsePermissions("permissions", []string{"usage:read", "bogus", "usage:read", "compute:write"}, &v)
	if len(got) != 2 || got[0] != UsageRead || got[1] != ComputeWrite {
		t.Fatalf("got %v", got)
	}
	var ae *api.Error
	if !errors.As(v.Err(), &ae) || len(ae.Fields) != 2 {
		t.Fatalf("err = %v", v.Err())
	}
	if ae.Fields[0].Field != "permissions.1" || ae.Fields[0].Type != api.FieldEnum {
		t.Errorf("field 0 = %+v", ae.Fields[0])
	}
	if ae.Fields[1].Field != "permissions.2" || ae.Fields[1].Type != api.FieldDuplicate {
		t.Errorf("field 1 = %+v", ae.Fields[1])
	}
}
