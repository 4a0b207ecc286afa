package sim

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"image"
	"image/color"
	"image/png"
	"math"
	"net/http"
	"strconv"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/engine"
	"github.com/svc-dev/svc/internal/images"
)

const (
	// maxImageSide caps the side of a simulated image: a larger size is
	// drawn scaled down to it, keeping its shape, so that the simulator
	// stays quick whatever is asked.
	maxImageSide = 1024
	// autoImageSide is the side of a square image of size auto.
	autoImageSide = 1024
	// imageLabel is the PNG's Software text: what made it.
	imageLabel = "svc simulator: a simulated image, drawn from a hash of the prompt"
)

// imageReply is a finished image generation.
type imageReply struct {
	body   api.ImagesResponse
	result *api.Result
}

// generateImages draws n PNG images for a prompt: a gradient between two
// colours with rings about a point, all chosen by a hash of the model,
// the prompt, the request's seed and the image's place, so the same
// request always gets the same images. Each PNG says in its text that it
// is simulated.
func (s *simulator) generateImages(ctx context.Context, modelID string, body []byte) (*imageReply, *api.Result) {
	req, err := images.Parse(body)
	if err != nil {
		return nil, badRequest(err.Error())
	}
	if modelID == "" {
		modelID = req.Model
	}
	m, fail := s.lookup(modelID, api.CapImageGeneration)
	if fail != nil {
		return nil, fail
	}
	if in := m.spec.Incomplete; in != nil {
		return nil, engine.Failure(http.StatusConflict, api.TypeConflict,
			fmt.Sprintf("model %s is not fully installed: %s", m.spec.ID, in.Describe()))
	}
	dir, err := parseDirectives(req.Prompt)
	if err != nil {
		return nil, badRequest(err.Error())
	}
	if r := dir.scripted(ctx); r != nil {
		return nil, r
	}
	res := s.work(ctx, m, s.cfg.Latency+s.cfg.TTFT)
	if res.Status != http.StatusOK {
		return nil, res
	}
	w, h := renderSize(req.Width, req.Height)
	var reqSeed *wholeInt
	if n, ok := requestSeed(body); ok {
		reqSeed = new(wholeInt(n))
	}
	sd := newSeed(m.spec.ID, []byte(req.Prompt), reqSeed)
	data := make([]api.ImageData, req.N)
	for i := range data {
		if err := ctx.Err(); err != nil {
			return nil, engine.Cancelled()
		}
		pic, err := drawImage(sd, i, w, h)
		if err != nil {
			return nil, engine.Failure(http.StatusInternalServerError, api.TypeServer, "encode image: "+err.Error())
		}
		data[i] = api.ImageData{B64JSON: base64.StdEncoding.EncodeToString(pic)}
	}
	return &imageReply{body: api.ImagesResponse{Created: s.cfg.Now().Unix(), Data: data}, result: res}, nil
}

// renderSize is the size drawn for a requested one (0 for auto): within
// maxImageSide, its shape kept.
func renderSize(w, h int) (int, int) {
	if w == 0 || h == 0 {
		return autoImageSide, autoImageSide
	}
	if side := max(w, h); side > maxImageSide {
		w, h = max(1, w*maxImageSide/side), max(1, h*maxImageSide/side)
	}
	return w, h
}

// requestSeed reads the request's seed, which local engines take, so that
// another seed draws other images.
func requestSeed(body []byte) (int64, bool) {
	var r struct {
		Seed *int64 `json:"seed"`
	}
	if err := json.Unmarshal(body, &r); err != nil || r.Seed == nil {
		return 0, false
	}
	return *r.Seed, true
}

// drawImage is image i of a request as a PNG: a paletted image, which
// encodes fast and small.
func drawImage(sd seed, i, w, h int) ([]byte, error) {
	r := sd.rng("image " + strconv.Itoa(i))
	from := color.RGBA{uint8(r.IntN(256)), uint8(r.IntN(256)), uint8(r.IntN(256)), 255}
	to := color.RGBA{uint8(r.IntN(256)), uint8(r.IntN(256)), uint8(r.IntN(256)), 255}
	palette := make(color.Palette, 256)
	for k := range palette {
		mix := func(a, b uint8) uint8 { return uint8((int(a)*(255-k) + int(b)*k) / 255) }
		palette[k] = color.RGBA{mix(from.R, to.R), mix(from.G, to.G), mix(from.B, to.B), 255}
	}
	angle := r.Float64() * 2 * math.Pi
	cx, cy := r.Float64()*float64(w), r.Float64()*float64(h)
	ring := float64(max(w, h)) / float64(4+r.IntN(12))
	dx, dy := math.Cos(angle), math.Sin(angle)
	span := math.Abs(dx)*float64(w) + math.Abs(dy)*float64(h)
	offset := min(0, dx*float64(w)) + min(0, dy*float64(h))
	img := image.NewPaletted(image.Rect(0, 0, w, h), palette)
	for y := range h {
		row := img.Pix[y*img.Stride:]
		for x := range w {
			t := (dx*float64(x) + dy*float64(y) - offset) / span
			k := uint8(math.Min(255, math.Max(0, t*255)))
			if int(math.Hypot(float64(x)-cx, float64(y)-cy)/ring)%2 == 1 {
				k = 255 - k
			}
			row[x] = k
		}
	}
	var b bytes.Buffer
	enc := png.Encoder{CompressionLevel: png.BestSpeed}
	if err := enc.Encode(&b, img); err != nil {
		return nil, err
	}
	return withText(b.Bytes(), "Software", imageLabel), nil
}

// withText puts a tEXt chunk after a PNG's header chunk, where readers
// look for it.
func withText(pngData []byte, keyword, text string) []byte {
	const afterHeader = 8 + 4 + 4 + 13 + 4 // signature, then IHDR's length, type, data and CRC
	if len(pngData) < afterHeader {
		return pngData
	}
	data := append(append([]byte(keyword), 0), text...)
	chunk := binary.BigEndian.AppendUint32(nil, uint32(len(data)))
	chunk = append(chunk, "tEXt"...)
	chunk = append(chunk, data...)
	chunk = binary.BigEndian.AppendUint32(chunk, crc32.ChecksumIEEE(chunk[4:]))
	out := make([]byte, 0, len(pngData)+len(chunk))
	out = append(out, pngData[:afterHeader]...)
	out = append(out, chunk...)
	return append(out, pngData[afterHeader:]...)
}
