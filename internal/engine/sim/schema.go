package sim

import (
	"encoding/json"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
)

// jsonFiller builds deterministic JSON values that follow a JSON schema
// loosely: the right types, enum members and property names. It does not
// attempt patterns, lengths or ranges, which is why strict schemas get the
// strict_schema_not_enforced notice.
type jsonFiller struct {
	r *rand.Rand
	// words is how many words the first free-text string gets; the
	// reply's length is steered through it.
	words int
	total int // words the text would have in full
	used  bool
}

// schemaNode is the part of a JSON schema the filler reads.
type schemaNode struct {
	Type       json.RawMessage        `json:"type"`
	Enum       []json.RawMessage      `json:"enum"`
	Const      json.RawMessage        `json:"const"`
	Properties map[string]*schemaNode `json:"properties"`
	Items      *schemaNode            `json:"items"`
	AnyOf      []*schemaNode          `json:"anyOf"`
	OneOf      []*schemaNode          `json:"oneOf"`
}

// maxProperties and maxDepth keep replies to odd schemas small.
const (
	maxProperties = 16
	maxDepth      = 4
)

// parseSchema reads a schema, or nil when there is none or it is unusable.
func parseSchema(raw json.RawMessage) *schemaNode {
	if len(raw) == 0 {
		return nil
	}
	var n schemaNode
	if json.Unmarshal(raw, &n) != nil {
		return nil
	}
	return &n
}

// object renders a JSON object for schema (nil: a default answer shape).
func (f *jsonFiller) object(schema *schemaNode) string {
	var b strings.Builder
	if schema == nil || (len(schema.Properties) == 0 && schema.typeName() == "") {
		b.WriteString(`{"answer": `)
		f.str(&b)
		b.WriteString(`, "n": `)
		b.WriteString(strconv.Itoa(f.r.IntN(1000)))
		b.WriteString("}")
		return b.String()
	}
	f.value(&b, schema, 0)
	return b.String()
}

func (n *schemaNode) typeName() string {
	if n == nil || len(n.Type) == 0 {
		return ""
	}
	var one string
	if json.Unmarshal(n.Type, &one) == nil {
		return one
	}
	var many []string
	if json.Unmarshal(n.Type, &many) == nil {
		for _, t := range many {
			if t != "null" {
				return t
			}
		}
		if len(many) > 0 {
			return many[0]
		}
	}
	return ""
}

func (f *jsonFiller) value(b *strings.Builder, n *schemaNode, depth int) {
	switch {
	case n == nil:
		f.str(b)
		return
	case len(n.Const) > 0:
		b.Write(compactJSON(n.Const))
		return
	case len(n.Enum) > 0:
		b.Write(compactJSON(n.Enum[f.r.IntN(len(n.Enum))]))
		return
	case len(n.AnyOf) > 0:
		f.value(b, n.AnyOf[0], depth)
		return
	case len(n.OneOf) > 0:
		f.value(b, n.OneOf[0], depth)
		return
	}
	typ := n.typeName()
	if typ == "" && len(n.Properties) > 0 {
		typ = "object"
	}
	switch typ {
	case "object":
		if depth >= maxDepth {
			b.WriteString("{}")
			return
		}
		keys := make([]string, 0, len(n.Properties))
		for k := range n.Properties {
			keys = append(keys, k)
		}
		slices.Sort(keys) // maps lose the schema's order; sorted is stable
		if len(keys) > maxProperties {
			keys = keys[:maxProperties]
		}
		b.WriteString("{")
		for i, k := range keys {
			if i > 0 {
				b.WriteString(", ")
			}
			key, _ := json.Marshal(k)
			b.Write(key)
			b.WriteString(": ")
			f.value(b, n.Properties[k], depth+1)
		}
		b.WriteString("}")
	case "array":
		if depth >= maxDepth {
			b.WriteString("[]")
			return
		}
		b.WriteString("[")
		for i := range 1 + f.r.IntN(2) {
			if i > 0 {
				b.WriteString(", ")
			}
			f.value(b, n.Items, depth+1)
		}
		b.WriteString("]")
	case "integer":
		b.WriteString(strconv.Itoa(f.r.IntN(1000)))
	case "number":
		b.WriteString(strconv.Itoa(f.r.IntN(100)) + "." + strconv.Itoa(1+f.r.IntN(9)))
	case "boolean":
		if f.r.IntN(2) == 0 {
			b.WriteString("false")
		} else {
			b.WriteString("true")
		}
	case "null":
		b.WriteString("null")
	default:
		f.str(b)
	}
}

// str writes a JSON string of words: the first one written takes the bulk
// of the reply's length, later ones are short.
func (f *jsonFiller) str(b *strings.Builder) {
	n, total := 1+f.r.IntN(3), 0
	if !f.used {
		n, total, f.used = f.words, f.total, true
	}
	b.WriteString(`"`)
	b.WriteString(strings.Join(words(f.r, n, max(n, total)), ""))
	b.WriteString(`"`)
}

func compactJSON(raw json.RawMessage) []byte {
	var v any
	if json.Unmarshal(raw, &v) != nil {
		return []byte("null")
	}
	out, _ := json.Marshal(v)
	return out
}
