package moderation

import (
	"bytes"
	"errors"
	"testing"
)

func TestInspectImage(t *testing.T) {
	tests := []struct {
		name string
		data []byte
		want string // media type; "" means refused
	}{
		{"png", pngBytes(t, 4, 3), "image/png"},
		{"jpeg", jpegBytes(t), "image/jpeg"},
		{"gif", gifBytes(t), "image/gif"},
		{"webp lossless", webpLossless, "image/webp"},
		{"empty", nil, ""},
		{"text", []byte("hello, world"), ""},
		{"png signature only", []byte("\x89PNG\r\n\x1a\n"), ""},
		{"truncated png header", pngBytes(t, 4, 3)[:20], ""},
		{"riff but not webp", []byte("RIFF\x04\x00\x00\x00WAVEfmt "), ""},
		{"webp bad chunk", append([]byte("RIFF\x0c\x00\x00\x00WEBP"), bytes.Repeat([]byte{0}, 8)...), ""},
		{"svg", []byte(`<svg xmlns="http://www.w3.org/2000/svg"/>`), ""},
		{"too wide", pngBytes(t, maxImageSide+1, 1), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := inspectImage(tt.data)
			if got != tt.want {
				t.Fatalf("inspectImage = %q, %v; want %q", got, err, tt.want)
			}
			if (err == nil) != (tt.want != "") {
				t.Fatalf("inspectImage error = %v", err)
			}
		})
	}
	if _, err := inspectImage([]byte("nope")); !errors.Is(err, errNotImage) {
		t.Errorf("non-image error %v does not wrap errNotImage", err)
	}
	if _, err := inspectImage(pngBytes(t, 1, maxImageSide+1)); err == nil || errors.Is(err, errNotImage) {
		t.Errorf("oversized image error %v: want a size error, not errNotImage", err)
	}
}
