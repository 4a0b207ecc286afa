package moderation

import (
	"bytes"
	"encoding/base64"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/svc-dev/svc/internal/api"
)

type fe struct{ field, typ string }

func modBody(input string) string { return `{"model":"guard-c:4b","input":` + input + `}` }

func textPart(s string) string { return `{"type":"text","text":` + strconv.Quote(s) + `}` }

func imgPart(url string) string {
	return `{"type":"image_url","image_url":{"url":` + strconv.Quote(url) + `}}`
}

func parts(ps ...string) string { return "[" + strings.Join(ps, ",") + "]" }

func repeat(s string, n int) string {
	items := make([]string, n)
	for i := range items {
		items[i] = s
	}
	return "[" + strings.Join(items, ",") + "]"
}

func TestParseAccepts(t *testing.T) {
	png := pngBytes(t, 2, 2)
	gif := gifBytes(t)
	tests := []struct {
		name   string
		body   string
		remote bool
		want   []api.ModerationCheck
		images bool
	}{
		{"string", modBody(`"hello"`), false, []api.ModerationCheck{{Texts: []string{"hello"}}}, false},
		{"whitespace string is content", modBody(`" "`), false, []api.ModerationCheck{{Texts: []string{" "}}}, false},
		{"strings, a check each", modBody(`["a","b","c"]`), false,
			[]api.ModerationCheck{{Texts: []string{"a"}}, {Texts: []string{"b"}}, {Texts: []string{"c"}}}, false},
		{"32 strings", modBody(repeat(`"x"`, 32)), false, slices.Repeat([]api.ModerationCheck{{Texts: []string{"x"}}}, 32), false},
		{"parts, one check", modBody(parts(textPart("look"), imgPart(dataURLOf("image/png", png)), textPart("and this"), imgPart(dataURLOf("image/gif", gif)))), false,
			[]api.ModerationCheck{{Texts: []string{"look", "and this"}, Images: []api.ModerationImage{{Data: png, MediaType: "image/png"}, {Data: gif, MediaType: "image/gif"}}}}, true},
		{"text parts only", modBody(parts(textPart("a"), textPart("b"))), false, []api.ModerationCheck{{Texts: []string{"a", "b"}}}, false},
		{"declared type loses to the bytes", modBody(parts(imgPart(dataURLOf("image/jpeg", png)))), false,
			[]api.ModerationCheck{{Images: []api.ModerationImage{{Data: png, MediaType: "image/png"}}}}, true},
		{"upper-case data URL, unpadded", modBody(parts(imgPart("DATA:IMAGE/PNG;BASE64," + base64.RawStdEncoding.EncodeToString(png)))), false,
			[]api.ModerationCheck{{Images: []api.ModerationImage{{Data: png, MediaType: "image/png"}}}}, true},
		{"webp", modBody(parts(imgPart(dataURLOf("image/webp", webpLossless)))), false,
			[]api.ModerationCheck{{Images: []api.ModerationImage{{Data: webpLossless, MediaType: "image/webp"}}}}, true},
		{"bare image_url string", modBody(`[{"type":"image_url","image_url":` + strconv.Quote(dataURLOf("image/png", png)) + `}]`), false,
			[]api.ModerationCheck{{Images: []api.ModerationImage{{Data: png, MediaType: "image/png"}}}}, true},
		{"https kept when allowed", modBody(parts(imgPart("https://example.com/cat.png?sig=1"))), true,
			[]api.ModerationCheck{{Images: []api.ModerationImage{{URL: "https://example.com/cat.png?sig=1"}}}}, true},
		{"unknown fields ignored", `{"model":"guard-c:4b","input":"x","user":"u","extra":{"a":[1]}}`, false, []api.ModerationCheck{{Texts: []string{"x"}}}, false},
		{"part extras ignored", modBody(`[{"type":"text","text":"x","cache_control":{}}]`), false, []api.ModerationCheck{{Texts: []string{"x"}}}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := Parse([]byte(tt.body), Options{AllowRemoteImages: tt.remote, DefaultModel: api.DefaultModerationModel})
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if r.Model != "guard-c:4b" || r.Defaulted || r.Images != tt.images {
				t.Errorf("Model %q, Images %v", r.Model, r.Images)
			}
			if !slices.EqualFunc(r.Checks, tt.want, checkEqual) {
				t.Errorf("Checks = %+v\nwant %+v", r.Checks, tt.want)
			}
		})
	}
}

// A body without a model, or with a null one, takes the organisation's
// moderation model; one that names a model badly is still a 422.
func TestParseModel(t *testing.T) {
	tests := []struct {
		name, body, def string
		want            string
		defaulted       bool
		fields          []fe
	}{
		{"named", `{"model":"guard-a:8b","input":"x"}`, "guard-b:4b", "guard-a:8b", false, nil},
		{"absent", `{"input":"x"}`, "guard-b:4b", "guard-b:4b", true, nil},
		{"null", `{"model":null,"input":"x"}`, "guard-b:4b", "guard-b:4b", true, nil},
		{"empty", `{"model":"","input":"x"}`, "guard-b:4b", "", false, []fe{{"model", api.FieldMissing}}},
		{"number", `{"model":5,"input":"x"}`, "guard-b:4b", "", false, []fe{{"model", api.FieldWrongType}}},
		{"object", `{"model":{"id":"guard-a:8b"},"input":"x"}`, "guard-b:4b", "", false, []fe{{"model", api.FieldWrongType}}},
		{"absent, no default", `{"input":"x"}`, "", "", false, []fe{{"model", api.FieldMissing}}},
		{"absent, input bad", `{"input":""}`, "guard-b:4b", "", false, []fe{{"input", api.FieldMissing}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := Parse([]byte(tt.body), Options{DefaultModel: tt.def})
			if tt.fields == nil {
				if err != nil || r.Model != tt.want || r.Defaulted != tt.defaulted {
					t.Fatalf("Parse = %+v, %v; want model %q, defaulted %v", r, err, tt.want, tt.defaulted)
				}
				return
			}
			var ae *api.Error
			if !errors.As(err, &ae) || ae.HTTPStatus() != http.StatusUnprocessableEntity {
				t.Fatalf("Parse = %+v, %v; want a 422", r, err)
			}
			var got []fe
			for _, f := range ae.Fields {
				got = append(got, fe{f.Field, f.Type})
			}
			if !slices.Equal(got, tt.fields) {
				t.Errorf("fields = %v, want %v", got, tt.fields)
			}
		})
	}
}

func checkEqual(a, b api.ModerationCheck) bool {
	return slices.Equal(a.Texts, b.Texts) && slices.EqualFunc(a.Images, b.Images, func(x, y api.ModerationImage) bool {
		return bytes.Equal(x.Data, y.Data) && x.MediaType == y.MediaType && x.URL == y.URL
	})
}

func TestParseRefuses(t *testing.T) {
	png64 := base64.StdEncoding.EncodeToString(pngBytes(t, 1, 1))
	tests := []struct {
		name string
		body string
		want []fe
	}{
		{"body not an object", `["x"]`, []fe{{"body", api.FieldWrongType}}},
		{"empty object", `{}`, []fe{{"input", api.FieldMissing}}},
		{"model number", `{"model":5,"input":"x"}`, []fe{{"model", api.FieldWrongType}}},
		{"model empty", `{"model":"","input":"x"}`, []fe{{"model", api.FieldMissing}}},
		{"input null", `{"model":"m","input":null}`, []fe{{"input", api.FieldMissing}}},
		{"input number", modBody(`5`), []fe{{"input", api.FieldWrongType}}},
		{"input object", modBody(`{"type":"text","text":"x"}`), []fe{{"input", api.FieldWrongType}}},
		{"input empty string", modBody(`""`), []fe{{"input", api.FieldMissing}}},
		{"input empty array", modBody(`[]`), []fe{{"input", api.FieldMissing}}},
		{"33 strings", modBody(repeat(`"x"`, 33)), []fe{{"input", api.FieldTooLong}}},
		{"33 parts", modBody(repeat(textPart("x"), 33)), []fe{{"input", api.FieldTooLong}}},
		{"empty string item", modBody(`["a",""]`), []fe{{"input.1", api.FieldMissing}}},
		{"strings then part", modBody(`["a",` + textPart("b") + `,"c"]`), []fe{{"input.1", api.FieldWrongType}}},
		{"part then strings", modBody(`[` + textPart("a") + `,"b","c"]`), []fe{{"input.1", api.FieldWrongType}, {"input.2", api.FieldWrongType}}},
		{"number item", modBody(`["a",1,null,["x"]]`), []fe{{"input.1", api.FieldWrongType}, {"input.2", api.FieldWrongType}, {"input.3", api.FieldWrongType}}},
		{"part without type", modBody(`[{"text":"x"}]`), []fe{{"input.0.type", api.FieldMissing}}},
		{"part type number", modBody(`[{"type":1}]`), []fe{{"input.0.type", api.FieldWrongType}}},
		{"unknown part type", modBody(`[{"type":"input_audio","input_audio":{}}]`), []fe{{"input.0.type", api.FieldEnum}}},
		{"text part without text", modBody(`[{"type":"text"}]`), []fe{{"input.0.text", api.FieldMissing}}},
		{"text part text number", modBody(`[{"type":"text","text":3}]`), []fe{{"input.0.text", api.FieldWrongType}}},
		{"text part empty", modBody(parts(textPart(""))), []fe{{"input.0.text", api.FieldMissing}}},
		{"image part without image_url", modBody(`[{"type":"image_url"}]`), []fe{{"input.0.image_url", api.FieldMissing}}},
		{"image_url number", modBody(`[{"type":"image_url","image_url":7}]`), []fe{{"input.0.image_url", api.FieldWrongType}}},
		{"image_url without url", modBody(`[{"type":"image_url","image_url":{"detail":"low"}}]`), []fe{{"input.0.image_url.url", api.FieldMissing}}},
		{"image url number", modBody(`[{"type":"image_url","image_url":{"url":1}}]`), []fe{{"input.0.image_url.url", api.FieldWrongType}}},
		{"data not image type", modBody(parts(textPart("a"), imgPart("data:text/plain;base64,"+png64))), []fe{{"input.1.image_url.url", api.FieldInvalid}}},
		{"data no comma", modBody(parts(imgPart("data:image/png;base64"))), []fe{{"input.0.image_url.url", api.FieldInvalid}}},
		{"data not base64", modBody(parts(imgPart("data:image/svg+xml,<svg/>"))), []fe{{"input.0.image_url.url", api.FieldInvalid}}},
		{"data empty", modBody(parts(imgPart("data:image/png;base64,"))), []fe{{"input.0.image_url.url", api.FieldInvalid}}},
		{"data bad base64", modBody(parts(imgPart("data:image/png;base64,!!!!"))), []fe{{"input.0.image_url.url", api.FieldInvalid}}},
		{"data not an image", modBody(parts(imgPart(dataURLOf("image/png", []byte("hello"))))), []fe{{"input.0.image_url.url", api.FieldInvalid}}},
		{"data truncated png", modBody(parts(imgPart(dataURLOf("image/png", pngBytes(t, 1, 1)[:16])))), []fe{{"input.0.image_url.url", api.FieldInvalid}}},
		{"data too many pixels", modBody(parts(imgPart(dataURLOf("image/png", pngBytes(t, maxImageSide+1, 1))))), []fe{{"input.0.image_url.url", api.FieldTooLong}}},
		{"bare string image bad", modBody(`[{"type":"image_url","image_url":"ftp://x/y.png"}]`), []fe{{"input.0.image_url", api.FieldInvalid}}},
		{"http url", modBody(parts(imgPart("http://example.com/a.png"))), []fe{{"input.0.image_url.url", api.FieldInvalid}}},
		{"file url", modBody(parts(imgPart("file:///etc/passwd"))), []fe{{"input.0.image_url.url", api.FieldInvalid}}},
		{"relative url", modBody(parts(imgPart("/a.png"))), []fe{{"input.0.image_url.url", api.FieldInvalid}}},
		{"https without host", modBody(parts(imgPart("https:///a.png"))), []fe{{"input.0.image_url.url", api.FieldInvalid}}},
		{"https with credentials", modBody(parts(imgPart("https://user:pw@example.com/a.png"))), []fe{{"input.0.image_url.url", api.FieldInvalid}}},
		{"every failure at once", `{"model":1,"input":[` + textPart("") + `,{"type":"x"},"s"]}`,
			[]fe{{"model", api.FieldWrongType}, {"input.0.text", api.FieldMissing}, {"input.1.type", api.FieldEnum}, {"input.2", api.FieldWrongType}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, remote := range []bool{false, true} {
				_, err := Parse([]byte(tt.body), Options{AllowRemoteImages: remote, DefaultModel: api.DefaultModerationModel})
				var ae *api.Error
				if !errors.As(err, &ae) || ae.HTTPStatus() != http.StatusUnprocessableEntity {
					t.Fatalf("Parse(remote=%v) = %v, want a 422", remote, err)
				}
				var got []fe
				for _, f := range ae.Fields {
					got = append(got, fe{f.Field, f.Type})
					if f.Message == "" {
						t.Errorf("%s: empty message", f.Field)
					}
				}
				if !slices.Equal(got, tt.want) {
					t.Errorf("fields = %v, want %v", got, tt.want)
				}
			}
		})
	}
}

func TestParseBadRequest(t *testing.T) {
	for _, body := range []string{``, `  `, `{`, `{"model":"m",}`, `nope`, `{"model":"m","input":"x"} trailing`} {
		_, err := Parse([]byte(body), Options{})
		var ae *api.Error
		if !errors.As(err, &ae) || ae.HTTPStatus() != http.StatusBadRequest || ae.Message == "" {
			t.Errorf("Parse(%q) = %v, want a 400", body, err)
		}
	}
}

func TestParseRemoteImageNotAllowed(t *testing.T) {
	body := modBody(parts(textPart("a"), textPart("b"), imgPart("https://example.com/a.png"), imgPart("https://example.com/b.png")))
	_, err := Parse([]byte(body), Options{})
	var ae *api.Error
	if !errors.As(err, &ae) {
		t.Fatalf("Parse = %v", err)
	}
	if ae.HTTPStatus() != http.StatusBadRequest || ae.Code != api.CodeRemoteImageURLNotAllowed || ae.Param != "input.2.image_url.url" || !ae.CodeHeader {
		t.Errorf("error = %+v", ae)
	}
	for _, hint := range []string{"data:", "allow_remote_image_urls"} {
		if !strings.Contains(ae.Message, hint) {
			t.Errorf("message %q does not mention %s", ae.Message, hint)
		}
	}
	// A malformed body is reported first: it must be fixed whatever the setting.
	body = modBody(parts(imgPart("https://example.com/a.png"), `{"type":"nope"}`))
	if _, err := Parse([]byte(body), Options{}); !errors.As(err, &ae) || ae.HTTPStatus() != http.StatusUnprocessableEntity {
		t.Errorf("Parse with a 422 and a remote URL = %v, want the 422", err)
	}
}

// The size limit is on decoded bytes, checked before decoding: exactly
// api.ModerationMaxImageBytes is judged as an image, one byte more is
// too_long. (Decoded zeros are not an image, hence value_error.)
func TestParseImageSizeLimit(t *testing.T) {
	for _, tt := range []struct {
		n    int
		want string
	}{{api.ModerationMaxImageBytes, api.FieldInvalid}, {api.ModerationMaxImageBytes + 1, api.FieldTooLong}} {
		p := parser{r: &Request{}}
		p.dataImage("input.0.image_url.url", "image/png;base64,"+base64.StdEncoding.EncodeToString(make([]byte, tt.n)))
		err := p.v.Err()
		var ae *api.Error
		if !errors.As(err, &ae) || len(ae.Fields) != 1 || ae.Fields[0].Type != tt.want {
			t.Errorf("%d bytes: %v, want %s", tt.n, err, tt.want)
		}
	}
	// Through Parse too, once: the body is 28 MB.
	huge := "data:image/png;base64," + strings.Repeat("A", base64.RawStdEncoding.EncodedLen(api.ModerationMaxImageBytes+1))
	_, err := Parse([]byte(modBody(parts(textPart("x"), imgPart(huge)))), Options{AllowRemoteImages: true})
	var ae *api.Error
	if !errors.As(err, &ae) || ae.HTTPStatus() != http.StatusUnprocessableEntity || len(ae.Fields) != 1 ||
		ae.Fields[0] != (api.FieldError{Field: "input.1.image_url.url", Type: api.FieldTooLong, Message: "the image is larger than 20 MB"}) {
		t.Errorf("Parse with a 20 MB + 1 image = %v", err)
	}
}
