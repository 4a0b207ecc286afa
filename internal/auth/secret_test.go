package auth

import (
	"strings"
	"testing"
)

func TestRedact(t *testing.T) {
	key := NewCredential(KindAPIKey)
	tok := NewCredential(KindWorkerToken)
	for _, tc := range []struct{ in, want string }{
		{"nothing here", "nothing here"},
		{"Bearer " + key.Secret + "\r\n", "Bearer svc_k_" + key.ID + "_[redacted]\r\n"},
		{"a " + tok.Secret + ", b " + key.Secret, "a svc_w_" + tok.ID + "_[redacted], b svc_k_" + key.ID + "_[redacted]"},
		{`"` + key.Secret[:30] + `"`, `"svc_k_` + key.ID + `_[redacted]"`}, // cut short
		{"svc_x_abc svc_ svc_k_", "svc_x_abc svc_ svc_k_"},
	} {
		if got := Redact(tc.in); got != tc.want {
			t.Errorf("Redact(%q) = %q, want %q", tc.in, got, tc.want)
		}
		if strings.Contains(Redact(tc.in), key.Secret[len(key.Secret)-20:]) {
			t.Errorf("secret left in %q", Redact(tc.in))
		}
	}
}
