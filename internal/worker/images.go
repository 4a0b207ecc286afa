package worker

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/svc-dev/svc/internal/api"
)

// Bounds on the remote images of one chat request, which the worker
// downloads and holds while the engine runs it.
const (
	maxRemoteImages     = 16
	maxRemoteImageBytes = 64 << 20 // all of them together
	remoteImagesWithin  = 30 * time.Second
)

// remoteImage is an image URL string in a chat request's body: where its
// JSON string lies, and the URL it decodes to.
type remoteImage struct {
	start, end int
	url        string
}

// inlineImages fetches the https image URLs of a chat request's messages
// through the worker's address guard and puts each in the body as a data:
// URL, every other byte as it came. Engines that take image URLs (vLLM,
// SGLang, llama-server) would fetch them themselves, from this host and
// with no guard, where an internal service or the cloud's metadata
// endpoint is in reach; they get the bytes instead.
func (a *Agent) inlineImages(ctx context.Context, body []byte) ([]byte, *api.Result) {
	// A body that never spells "image" names no image part, unless it
	// escapes the name; escapes are read in full.
	if !bytes.Contains(body, []byte("image")) && !bytes.Contains(body, []byte(`\u`)) {
		return body, nil
	}
	imgs, err := findRemoteImages(body)
	switch {
	case err != nil && len(imgs) > 0:
		// Not to be passed on with a URL no guard has judged.
		return nil, finalFailure(http.StatusBadRequest, api.TypeInvalidRequest, api.CodeRemoteImageRefused,
			"the request's JSON does not parse past its image URLs")
	case len(imgs) == 0:
		return body, nil // one that does not parse is the engine's to refuse
	}
	if len(imgs) > maxRemoteImages {
		return nil, finalFailure(http.StatusBadRequest, api.TypeInvalidRequest, api.CodeRemoteImageRefused,
			fmt.Sprintf("a request may name at most %d remote images; send the others as data: URLs", maxRemoteImages))
	}
	fctx, cancel := context.WithTimeout(ctx, remoteImagesWithin)
	defer cancel()
	var out bytes.Buffer
	out.Grow(len(body))
	at, total := 0, 0
	for _, im := range imgs {
		got, res := a.fetchImage(fctx, im.url, true)
		if res != nil && ctx.Err() == nil && fctx.Err() != nil {
			return nil, finalFailure(http.StatusBadGateway, api.TypeUpstream, api.CodeRemoteImageUnavailable,
				fmt.Sprintf("the request's remote images were not all fetched within %s", remoteImagesWithin))
		}
		if res != nil {
			return nil, res
		}
		if total += len(got.Data); total > maxRemoteImageBytes {
			return nil, finalFailure(http.StatusBadRequest, api.TypeInvalidRequest, api.CodeRemoteImageRefused,
				fmt.Sprintf("the request's remote images come to more than %d MiB together", maxRemoteImageBytes>>20))
		}
		out.Write(body[at:im.start])
		out.WriteString(`"data:`)
		out.WriteString(got.MediaType)
		out.WriteString(`;base64,`)
		enc := base64.NewEncoder(base64.StdEncoding, &out)
		_, _ = enc.Write(got.Data)
		_ = enc.Close()
		out.WriteByte('"')
		at = im.end
	}
	out.Write(body[at:])
	return out.Bytes(), nil
}

// findRemoteImages walks a chat request's JSON and returns its http(s)
// image URLs: the string at messages[i].content[j].image_url, or at its
// url member, as decoded (escapes read), in the order they appear; with an
// error, those found before the JSON broke.
func findRemoteImages(body []byte) ([]remoteImage, error) {
	dec := json.NewDecoder(bytes.NewReader(body))
	type level struct {
		array bool
		key   string // an object's member being read
		value bool   // an object's next token is its member's value
	}
	var stack []level
	var out []remoteImage
	// path reports whether the value being read sits at want, matched
	// from the top ("" for any array index).
	path := func(want ...string) bool {
		if len(stack) != len(want) {
			return false
		}
		for i, w := range want {
			l := stack[i]
			if (w == "" && !l.array) || (w != "" && (l.array || l.key != w)) {
				return false
			}
		}
		return true
	}
	for {
		before := dec.InputOffset()
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		top := len(stack) - 1
		if top >= 0 && !stack[top].array && !stack[top].value {
			// An object's key.
			if k, ok := tok.(string); ok {
				stack[top].key, stack[top].value = k, true
				continue
			}
		}
		switch t := tok.(type) {
		case json.Delim:
			switch t {
			case '{', '[':
				stack = append(stack, level{array: t == '['})
				continue
			default:
				stack = stack[:top]
			}
		case string:
			lower := strings.ToLower(t)
			if (strings.HasPrefix(lower, "https://") || strings.HasPrefix(lower, "http://")) &&
				(path("messages", "", "content", "", "image_url") || path("messages", "", "content", "", "image_url", "url")) {
				// The string's own bytes: after what separates it from
				// the token before (space, ':' or ','), through its end.
				end := int(dec.InputOffset())
				start := int(before) + bytes.IndexByte(body[before:end], '"')
				out = append(out, remoteImage{start: start, end: end, url: t})
			}
		}
		// A value was read: an object's next token is a key again.
		if top = len(stack) - 1; top >= 0 && !stack[top].array {
			stack[top].value = false
		}
	}
}
