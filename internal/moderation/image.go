package moderation

import (
	"bytes"
	"errors"
	"fmt"
	"image"
	"image/gif"
	"image/jpeg"
	"image/png"
	"io"

	"golang.org/x/image/webp"
)

// maxImageSide bounds each side of an image. A few megabytes of PNG can
// claim a size that would take gigabytes to decode in the engine; 16384 is
// above any camera and about where decoders' own limits start (WebP's is
// 16383).
const maxImageSide = 16384

var errNotImage = errors.New("not a PNG, JPEG, GIF or WebP image")

// inspectImage returns the media type of an image from its bytes, after
// reading its header with the format's own decoder. Pixels are never
// decoded: the check costs the header, not the image. The format is picked
// by its signature rather than through image.DecodeConfig, which would
// accept any format some other package registered.
func inspectImage(data []byte) (string, error) {
	var (
		mediaType string
		decode    func(io.Reader) (image.Config, error)
	)
	switch {
	case bytes.HasPrefix(data, []byte("\x89PNG\r\n\x1a\n")):
		mediaType, decode = "image/png", png.DecodeConfig
	case bytes.HasPrefix(data, []byte("\xff\xd8\xff")):
		mediaType, decode = "image/jpeg", jpeg.DecodeConfig
	case bytes.HasPrefix(data, []byte("GIF87a")), bytes.HasPrefix(data, []byte("GIF89a")):
		mediaType, decode = "image/gif", gif.DecodeConfig
	case len(data) >= 12 && string(data[:4]) == "RIFF" && string(data[8:12]) == "WEBP":
		mediaType, decode = "image/webp", webp.DecodeConfig
	default:
		return "", errNotImage
	}
	cfg, err := decode(bytes.NewReader(data))
	if err != nil {
		return "", fmt.Errorf("%w: the %s header does not decode: %v", errNotImage, mediaType, err)
	}
	if cfg.Width <= 0 || cfg.Height <= 0 {
		return "", fmt.Errorf("%w: the %s is empty (%d×%d)", errNotImage, mediaType, cfg.Width, cfg.Height)
	}
	if cfg.Width > maxImageSide || cfg.Height > maxImageSide {
		return "", fmt.Errorf("the image is %d×%d pixels; at most %d a side", cfg.Width, cfg.Height, maxImageSide)
	}
	return mediaType, nil
}

// sniffImage is inspectImage for callers that only need the media type.
func sniffImage(data []byte) (string, bool) {
	mt, err := inspectImage(data)
	return mt, err == nil
}
