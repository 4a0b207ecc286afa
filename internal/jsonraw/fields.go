package jsonraw

import (
	"encoding/json"

	"github.com/svc-dev/svc/internal/jsontext"
)

// Fields is an object read as its members in the order sent, each name and
// value a part of the body it was read from (a name with escapes aside,
// which is decoded), for a reader done with them before the body changes:
// a translation that writes what it reads into a body of its own. A lookup
// walks the members, which for the few that a request's objects have is
// quicker than a map, and a translator reads every object into one list
// (FieldReader), so reading an object allocates nothing once the list has
// grown.
type Fields []Field

// Field is one member of an object.
type Field struct {
	Name  []byte
	Value json.RawMessage
}

// AppendFields appends the members of raw, an object of a body checked
// whole (as CheckedObjectView reads it), to dst. It reports false, with
// dst as it was, when raw is not an object.
func AppendFields(dst Fields, raw []byte) (Fields, bool) {
	if KindOf(raw) != Object {
		return dst, false
	}
	n := len(dst)
	var s jsontext.Scanner
	s.Reset(raw)
	s.Peek()
	s.Open()
	for i := 0; s.Next(i, '}'); i++ {
		name := s.Name()
		v := s.SkimRaw()
		if s.Bad() {
			return dst[:n], false
		}
		dst = append(dst, Field{Name: name, Value: v})
	}
	if s.End(); s.Bad() {
		return dst[:n], false
	}
	return dst, true
}

// FieldReader reads the objects of one body into one list of members,
// handing out each object's part of it: a translation reads hundreds of
// small objects. The zero value is ready.
type FieldReader struct{ list Fields }

// Read is the members of raw, an object of a body checked whole, as a part
// of the reader's list that later reads leave as it is; false when raw is
// not an object.
func (r *FieldReader) Read(raw []byte) (Fields, bool) {
	n := len(r.list)
	var ok bool
	if r.list, ok = AppendFields(r.list, raw); !ok {
		return nil, false
	}
	return r.list[n:len(r.list):len(r.list)], true
}

// Get is the value of key as sent, null included. A key sent twice has
// its last value, as encoding/json reads it; names are matched exactly,
// where encoding/json would fold case into a struct's field.
func (f Fields) Get(key string) (json.RawMessage, bool) {
	for i := len(f) - 1; i >= 0; i-- {
		if string(f[i].Name) == key {
			return f[i].Value, true
		}
	}
	return nil, false
}

// Field is the value of key, null read as not sent, as Members.Field
// reads it.
func (f Fields) Field(key string) (json.RawMessage, bool) {
	v, ok := f.Get(key)
	if !ok || KindOf(v) == Null {
		return nil, false
	}
	return v, true
}
