package sim

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/chat"
	"github.com/svc-dev/svc/internal/engine"
)

// embeddingRequest is an OpenAI embeddings request.
type embeddingRequest struct {
	Model          string          `json:"model"`
	Input          json.RawMessage `json:"input"`
	EncodingFormat string          `json:"encoding_format"`
	Dimensions     *int            `json:"dimensions"`
}

// embedInput is one input: text, or token ids.
type embedInput struct {
	text   string
	tokens []int
	isText bool
}

// key is what the input's vector is derived from.
func (in embedInput) key() []byte {
	if in.isText {
		return append([]byte("text\x00"), in.text...)
	}
	b, _ := json.Marshal(in.tokens) // []int always encodes
	return append([]byte("tokens\x00"), b...)
}

// tokenCount is the input's length in tokens, estimated for text as for
// chat prompts.
func (in embedInput) tokenCount() int {
	if in.isText {
		return max(1, (len(in.text)+3)/4)
	}
	return len(in.tokens)
}

// parseEmbeddingInput reads input as a string, an array of strings, an
// array of token ids or an array of such arrays.
func parseEmbeddingInput(raw json.RawMessage) ([]embedInput, error) {
	var one string
	if json.Unmarshal(raw, &one) == nil {
		return nonEmpty([]embedInput{{text: one, isText: true}})
	}
	var texts []string
	if json.Unmarshal(raw, &texts) == nil {
		out := make([]embedInput, len(texts))
		for i, t := range texts {
			out[i] = embedInput{text: t, isText: true}
		}
		return nonEmpty(out)
	}
	var ids []int
	if json.Unmarshal(raw, &ids) == nil {
		if len(ids) == 0 {
			return nil, fmt.Errorf("input: must not be empty")
		}
		return []embedInput{{tokens: ids}}, nil
	}
	var batches [][]int
	if json.Unmarshal(raw, &batches) == nil {
		out := make([]embedInput, len(batches))
		for i, b := range batches {
			out[i] = embedInput{tokens: b}
		}
		return nonEmpty(out)
	}
	return nil, fmt.Errorf("input: want a string, an array of strings, an array of token ids or an array of token-id arrays")
}

func nonEmpty(in []embedInput) ([]embedInput, error) {
	if len(in) == 0 {
		return nil, fmt.Errorf("input: must not be empty")
	}
	for i, x := range in {
		if (x.isText && x.text == "") || (!x.isText && len(x.tokens) == 0) {
			return nil, fmt.Errorf("input[%d]: must not be empty", i)
		}
	}
	return in, nil
}

// embedReply is a finished embeddings answer.
type embedReply struct {
	body   object
	result *api.Result
}

// embed answers an embeddings request with deterministic unit vectors:
// the same model and input always give the same vector.
func (s *simulator) embed(ctx context.Context, modelID string, body []byte) (*embedReply, *api.Result) {
	var req embeddingRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return nil, engine.Failure(http.StatusBadRequest, api.TypeInvalidRequest, "invalid JSON body: "+err.Error())
	}
	if modelID == "" {
		modelID = req.Model
	}
	m, fail := s.lookup(modelID, api.CapEmbeddings)
	if fail != nil {
		return nil, fail
	}
	inputs, err := parseEmbeddingInput(req.Input)
	if err != nil {
		return nil, engine.Failure(http.StatusBadRequest, api.TypeInvalidRequest, err.Error())
	}
	dims := m.spec.Dimensions
	if dims <= 0 {
		dims = 256
	}
	if req.Dimensions != nil {
		if *req.Dimensions < 1 || *req.Dimensions > dims {
			return nil, engine.Failure(http.StatusBadRequest, api.TypeInvalidRequest,
				fmt.Sprintf("dimensions: %s gives vectors of 1 to %d dimensions, not %d", m.spec.ID, dims, *req.Dimensions))
		}
	}
	switch req.EncodingFormat {
	case "", "float", "base64":
	default:
		return nil, engine.Failure(http.StatusBadRequest, api.TypeInvalidRequest,
			fmt.Sprintf("encoding_format: want float or base64, got %q", req.EncodingFormat))
	}
	// Directives ride in the last text input, as in the last user message
	// of a chat request; only hang and fail mean anything here.
	var dir directives
	if last := inputs[len(inputs)-1]; last.isText {
		if dir, err = parseDirectives(last.text); err != nil {
			return nil, engine.Failure(http.StatusBadRequest, api.TypeInvalidRequest, err.Error())
		}
	}
	promptTokens := 0
	for i, in := range inputs {
		n := in.tokenCount()
		if w := m.spec.ContextWindow; w > 0 && n > w {
			r := engine.Failure(engine.ContextLengthStatus(api.KindEmbeddings), chat.TypeContextLengthExceeded,
				fmt.Sprintf("input[%d] is %d tokens, more than the model's maximum context length of %d tokens", i, n, w))
			r.Error.Code = chat.TypeContextLengthExceeded
			return nil, r
		}
		promptTokens += n
	}

	if r := dir.scripted(ctx); r != nil {
		return nil, r
	}
	res := s.work(ctx, m, s.cfg.Latency+s.cfg.TTFT)
	if res.Status != http.StatusOK {
		return nil, res
	}

	data := make([]object, len(inputs))
	for i, in := range inputs {
		vec := embedding(m.spec.ID, in, dims)
		if req.Dimensions != nil {
			vec = normalize(vec[:*req.Dimensions])
		}
		var value any = vec
		if req.EncodingFormat == "base64" {
			value = encodeBase64(vec)
		}
		data[i] = object{{"object", "embedding"}, {"index", i}, {"embedding", value}}
	}
	res.Usage = &api.Usage{PromptTokens: promptTokens, TotalTokens: promptTokens}
	return &embedReply{
		body: object{
			{"object", "list"},
			{"data", data},
			{"model", m.spec.ID},
			{"usage", object{{"prompt_tokens", promptTokens}, {"total_tokens", promptTokens}}},
		},
		result: res,
	}, nil
}

// embedding is the unit vector of one input. Shortened vectors are
// prefixes of it, renormalised, as with Matryoshka-trained models.
func embedding(model string, in embedInput, dims int) []float32 {
	h := sha256.New()
	h.Write([]byte(model))
	h.Write([]byte{0})
	h.Write(in.key())
	d := h.Sum(nil)
	r := rand.New(rand.NewPCG(binary.LittleEndian.Uint64(d[0:8]), binary.LittleEndian.Uint64(d[8:16])))
	vec := make([]float32, dims)
	for i := range vec {
		vec[i] = float32(r.NormFloat64())
	}
	return normalize(vec)
}

// normalize scales v to unit length in place and returns it.
func normalize(v []float32) []float32 {
	var sum float64
	for _, x := range v {
		sum += float64(x) * float64(x)
	}
	if sum == 0 {
		v[0] = 1 // a zero vector has no direction; pick one
		return v
	}
	inv := 1 / math.Sqrt(sum)
	for i := range v {
		v[i] = float32(float64(v[i]) * inv)
	}
	return v
}

// encodeBase64 is OpenAI's base64 encoding: little-endian float32s.
func encodeBase64(v []float32) string {
	buf := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(buf[4*i:], math.Float32bits(x))
	}
	return base64.StdEncoding.EncodeToString(buf)
}
