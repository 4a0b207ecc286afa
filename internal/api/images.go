package api

import (
	"fmt"
	"strings"
)

// Image generation on the link and in usage rows.
const (
	// KindImages carries an image generation request, checked by the
	// gateway and asking for b64_json; the worker answers with an
	// ImagesResponse.
	KindImages = "images"
	// RequestImages is the usage row type of an image generation; the
	// row's images count the images made.
	RequestImages = "images"
)

// ImagesResponse is the answer to POST /v1/images/generations.
type ImagesResponse struct {
	Created int64       `json:"created"`
	Data    []ImageData `json:"data"`
}

// ImageData is one generated image, base64-encoded.
type ImageData struct {
	B64JSON       string `json:"b64_json"`
	RevisedPrompt string `json:"revised_prompt,omitempty"`
}

// Incomplete describes a model an engine lists but has not fully
// installed: a file of it missing, or still downloading.
type Incomplete struct {
	// Missing names the model's files that are not there.
	Missing []string `json:"missing,omitempty"`
	// Total and Completed are the bytes of a download still running.
	Total     int64 `json:"total,omitempty"`
	Completed int64 `json:"completed,omitempty"`
}

// Describe says what is missing, for an error message.
func (i *Incomplete) Describe() string {
	var parts []string
	if len(i.Missing) > 0 {
		parts = append(parts, strings.Join(i.Missing, ", ")+" missing")
	}
	if i.Total > 0 {
		parts = append(parts, fmt.Sprintf("downloading, %d%% of %s", i.Completed*100/i.Total, bytesIEC(i.Total)))
	}
	if len(parts) == 0 {
		return "not fully installed"
	}
	return strings.Join(parts, "; ")
}

// bytesIEC is n bytes for people: 6.5 GiB, 120 MiB.
func bytesIEC(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit && exp < 4; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTP"[exp])
}
