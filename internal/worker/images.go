package worker

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/engine"
	"github.com/svc-dev/svc/internal/moderation"
)

// Bounds on the remote images of one chat request, which the worker
// downloads and holds while the engine runs it.
const (
	maxRemoteImages     = 16
	maxRemoteImageBytes = 64 << 20 // all of them together
)

// inlineImages fetches the https image URLs of a chat request's messages
// through the worker's address guard and puts each in the body as a data:
// URL. Engines that take image URLs (vLLM, SGLang, llama-server) would
// fetch them themselves, from this host and with no guard, where an
// internal service or the cloud's metadata endpoint is in reach; they get
// the bytes instead. A body without remote images is returned as it is.
func (a *Agent) inlineImages(ctx context.Context, body []byte) ([]byte, *api.Result) {
	if !bytes.Contains(body, []byte(`"image_url"`)) || !bytes.Contains(bytes.ToLower(body), []byte(`http`)) {
		return body, nil
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber() // numbers go back to the engine as they came
	var req map[string]any
	if err := dec.Decode(&req); err != nil {
		return body, nil // the engine says what is wrong with it
	}
	fetched, total, changed := 0, 0, false
	msgs, _ := req["messages"].([]any)
	for _, m := range msgs {
		msg, _ := m.(map[string]any)
		parts, _ := msg["content"].([]any)
		for _, p := range parts {
			part, _ := p.(map[string]any)
			if part == nil || part["type"] != "image_url" {
				continue
			}
			// image_url is {"url": ...}, or the URL itself.
			holder, key := part, "image_url"
			raw, _ := part["image_url"].(string)
			if obj, ok := part["image_url"].(map[string]any); ok {
				holder, key = obj, "url"
				raw, _ = obj["url"].(string)
			}
			lower := strings.ToLower(raw)
			if !strings.HasPrefix(lower, "https://") && !strings.HasPrefix(lower, "http://") {
				continue
			}
			if fetched++; fetched > maxRemoteImages {
				return nil, finalFailure(http.StatusBadRequest, api.TypeInvalidRequest, api.CodeRemoteImageRefused,
					fmt.Sprintf("a request may name at most %d remote images; send the others as data: URLs", maxRemoteImages))
			}
			img, res := a.fetchChatImage(ctx, raw)
			if res != nil {
				return nil, res
			}
			if total += len(img.Data); total > maxRemoteImageBytes {
				return nil, finalFailure(http.StatusBadRequest, api.TypeInvalidRequest, api.CodeRemoteImageRefused,
					fmt.Sprintf("the request's remote images come to more than %d MiB together", maxRemoteImageBytes>>20))
			}
			holder[key] = "data:" + img.MediaType + ";base64," + base64.StdEncoding.EncodeToString(img.Data)
			changed = true
		}
	}
	if !changed {
		return body, nil
	}
	var out bytes.Buffer
	enc := json.NewEncoder(&out)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(req); err != nil {
		return nil, engine.Failure(http.StatusInternalServerError, api.TypeServer, "encode the request with its images: "+err.Error())
	}
	return bytes.TrimSuffix(out.Bytes(), []byte("\n")), nil
}

// fetchChatImage is one remote image of a chat request, or why not: a URL
// at fault is 400 remote_image_refused, a fetch that failed 502
// remote_image_unavailable, neither worth another worker's try.
func (a *Agent) fetchChatImage(ctx context.Context, url string) (api.ModerationImage, *api.Result) {
	img, err := a.images.Fetch(ctx, url)
	if err == nil {
		return img, nil
	}
	if ctx.Err() != nil {
		return api.ModerationImage{}, engine.Cancelled()
	}
	var fe *moderation.FetchError
	if errors.As(err, &fe) && fe.Refused {
		return api.ModerationImage{}, finalFailure(http.StatusBadRequest, api.TypeInvalidRequest, api.CodeRemoteImageRefused, err.Error())
	}
	return api.ModerationImage{}, finalFailure(http.StatusBadGateway, api.TypeUpstream, api.CodeRemoteImageUnavailable, err.Error())
}
