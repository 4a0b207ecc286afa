package worker

import (
	"bytes"
	"context"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/engine"
	"github.com/svc-dev/svc/internal/jsontext"
)

// renamingSink gives the replies to a model offered under an alias
// (--model-alias ID=LOCAL) the id the client asked for: the engine names
// its own model, which the client never asked for and may not know. Only
// aliased requests pass through it, so the others pay nothing per chunk.
type renamingSink struct {
	out   engine.Sink
	model []byte // the requested id, as a JSON string
}

// renamed reports whether a kind's replies name their model: chat,
// completion, embeddings and rerank answers are JSON objects with a
// top-level model.
func renamed(kind string) bool {
	return kind == api.KindChat || kind == api.KindCompletion || kind == api.KindEmbeddings || kind == api.KindRerank
}

func newRenamingSink(out engine.Sink, model string) renamingSink {
	return renamingSink{out: out, model: jsontext.AppendString(nil, model)}
}

func (s renamingSink) Event(ctx context.Context, data []byte) error {
	return s.out.Event(ctx, renameModel(data, s.model))
}

func (s renamingSink) Body(ctx context.Context, data []byte) error {
	return s.out.Body(ctx, renameModel(data, s.model))
}

// renameModel is obj with the value of its top-level "model" member
// replaced by model (a JSON string), or obj itself when that member
// already says model, is not a string, or is not there. The members
// before it are skimmed, not parsed, and nothing after it is read: the
// member comes early in the engines' chunks.
func renameModel(obj, model []byte) []byte {
	var s jsontext.Scanner
	s.Reset(obj)
	if s.Peek() != '{' {
		return obj
	}
	s.Open()
	for n := 0; s.Next(n, '}'); n++ {
		k, kind := s.Key()
		if kind != jsontext.ASCII || string(k) != "model" {
			s.Skim()
			continue
		}
		if s.Peek() != '"' {
			return obj
		}
		start := s.Offset()
		v := s.Raw()
		if s.Bad() || bytes.Equal(v, model) {
			return obj
		}
		out := make([]byte, 0, len(obj)-len(v)+len(model))
		out = append(append(append(out, obj[:start]...), model...), obj[start+len(v):]...)
		return out
	}
	return obj
}
