package chat

import "testing"

func TestSplitDataURL(t *testing.T) {
	for _, tc := range []struct {
		in          string
		media, data string
		ok          bool
	}{
		{"data:image/png;base64,AAAA", "image/png", "AAAA", true},
		{"DATA:Image/PNG;BASE64,AAAA", "image/png", "AAAA", true},
		{"data:;base64,", "", "", true},
		{"data:image/png,AAAA", "", "", false},
		{"data:image/png;base64", "", "", false},
		{"https://x.test/a.png", "", "", false},
		{"", "", "", false},
	} {
		media, data, ok := SplitDataURL(tc.in)
		if media != tc.media || data != tc.data || ok != tc.ok {
			t.Errorf("SplitDataURL(%q) = %q, %q, %v", tc.in, media, data, ok)
		}
	}
}
