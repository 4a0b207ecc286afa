package chat

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
	"unsafe"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/jsonraw"
	"github.com/svc-dev/svc/internal/jsontext"
)

// The request is kept as raw JSON rather than decoded into structs: fields
// the gateway does not own must reach the worker byte for byte, in the order
// the client sent them, and numbers must never pass through float64. The
// helpers below only ever run on input that jsontext.Valid has accepted, so
// they can stay small; they still fail safely on anything else.

var errBadJSON = errors.New("chat: malformed JSON")

// member is one key of an object; rawKey keeps the key exactly as sent so
// that re-encoding an object does not alter keys the gateway does not own.
type member struct {
	rawKey []byte
	key    string
	value  json.RawMessage
}

// object is a JSON object that remembers key order. A repeated key keeps
// its first position and its last value, which is what encoding/json (and
// the engines) make of duplicates, so what is validated is what is sent.
type object struct {
	members []member
	// index finds a member of a large object; a small one, which is what
	// requests are made of, is searched in order, cheaper than a map.
	index map[string]int
	// inline holds the members of a small object (a message, a content
	// part), which then costs one allocation.
	inline [4]member
	// folds: a member's name holds a capital or a letter outside ASCII,
	// so that two names, or a name and a field the gateway reads, may be
	// equal under encoding/json's case folding (see checker.field).
	// twinsChecked: the object's names were compared with each other.
	folds, twinsChecked bool
}

// indexFrom is the number of members from which an object is indexed, so
// that a body of many members costs no more than linear time.
const indexFrom = 16

// parseBody is parseObject for a body that is not known to be JSON: one
// pass of jsontext's scanner both checks it, as jsontext.Valid would, and
// splits it into members, where checking it first and then splitting it
// read a conversation twice. ok is false when raw is not JSON, or not an
// object.
func parseBody(raw []byte) (o *object, ok bool) {
	var s jsontext.Scanner
	s.Reset(raw)
	if s.Peek() != '{' {
		return nil, false
	}
	o = &object{}
	o.members = o.inline[:0]
	s.Open()
	for n := 0; s.Next(n, '}'); n++ {
		at := s.Offset()
		k, _ := s.Key()
		if s.Bad() {
			return nil, false
		}
		// The name is a part of raw: with its quotes, it is what was sent.
		rawKey := raw[at : at+len(k)+2]
		key, ok := decodeString(rawKey)
		value := s.Raw()
		if !ok || s.Bad() {
			return nil, false
		}
		o.put(member{rawKey: rawKey, key: key, value: value})
	}
	s.End()
	if s.Bad() {
		return nil, false
	}
	return o, true
}

func parseObject(raw []byte) (*object, error) {
	o := &object{}
	if err := o.parse(raw); err != nil {
		return nil, err
	}
	return o, nil
}

// parse makes o the object raw holds, in place of what it held.
func (o *object) parse(raw []byte) error {
	_, err := o.parseAt(raw, skipSpace(raw, 0))
	return err
}

// parseAt makes o the object that starts at raw[i], in place of what it
// held, and returns the index just past it.
func (o *object) parseAt(raw []byte, i int) (int, error) {
	o.members, o.index = o.inline[:0], nil
	o.folds, o.twinsChecked = false, false
	if i >= len(raw) || raw[i] != '{' {
		return 0, errBadJSON
	}
	i = skipSpace(raw, i+1)
	if i < len(raw) && raw[i] == '}' {
		return i + 1, nil
	}
	for {
		if i >= len(raw) || raw[i] != '"' {
			return 0, errBadJSON
		}
		j, err := skipString(raw, i)
		if err != nil {
			return 0, err
		}
		rawKey := raw[i:j]
		key, ok := decodeString(rawKey)
		if !ok {
			return 0, errBadJSON
		}
		i = skipSpace(raw, j)
		if i >= len(raw) || raw[i] != ':' {
			return 0, errBadJSON
		}
		i = skipSpace(raw, i+1)
		j, err = skipValue(raw, i)
		if err != nil {
			return 0, err
		}
		o.put(member{rawKey: rawKey, key: key, value: raw[i:j]})
		i = skipSpace(raw, j)
		if i >= len(raw) {
			return 0, errBadJSON
		}
		switch raw[i] {
		case ',':
			i = skipSpace(raw, i+1)
		case '}':
			return i + 1, nil
		default:
			return 0, errBadJSON
		}
	}
}

func (o *object) put(m member) {
	if !o.folds {
		o.folds = jsonraw.MayFold(m.key)
	}
	if at := o.find(m.key); at >= 0 {
		o.members[at].value = m.value
		return
	}
	o.members = append(o.members, m)
	switch {
	case o.index != nil:
		o.index[m.key] = len(o.members) - 1
	case len(o.members) >= indexFrom:
		o.index = make(map[string]int, 2*len(o.members))
		for i, m := range o.members {
			o.index[m.key] = i
		}
	}
}

// caseTwins is the 400 of an object with two member names that differ
// only in case, or nil.
func (o *object) caseTwins() *api.Error {
	if !o.folds {
		return nil
	}
	o.twinsChecked = true
	return jsonraw.CaseTwins(len(o.members), func(i int) string { return o.members[i].key })
}

// caseTwin is the name of a member that is key in another case, "" when
// none is.
func (o *object) caseTwin(key string) string {
	if !o.folds {
		return ""
	}
	for i := range o.members {
		if k := o.members[i].key; k != key && strings.EqualFold(k, key) {
			return k
		}
	}
	return ""
}

// find returns the position of key's member, -1 when absent.
func (o *object) find(key string) int {
	if o.index != nil {
		if at, ok := o.index[key]; ok {
			return at
		}
		return -1
	}
	for i := range o.members {
		if o.members[i].key == key {
			return i
		}
	}
	return -1
}

// get returns the value of key; ok is false when the key is absent.
func (o *object) get(key string) (json.RawMessage, bool) {
	at := o.find(key)
	if at < 0 {
		return nil, false
	}
	return o.members[at].value, true
}

// field returns the value of key, treating null as not sent: every optional
// field of the request reads null that way.
func (o *object) field(key string) (json.RawMessage, bool) {
	v, ok := o.get(key)
	if !ok || jsonraw.KindOf(v) == jsonraw.Null {
		return nil, false
	}
	return v, true
}

// set replaces the value of key in place, or appends the key.
func (o *object) set(key string, value json.RawMessage) {
	o.put(member{key: key, value: value})
}

// clone copies the member list so that set on the copy leaves o alone; the
// raw values are shared, which is safe because they are never written.
func (o *object) clone() *object {
	c := &object{members: append([]member(nil), o.members...)}
	if o.index != nil {
		c.index = make(map[string]int, len(o.index))
		for k, v := range o.index {
			c.index[k] = v
		}
	}
	return c
}

// encodeWith writes the object compactly as encode would after set of
// each of over in turn: a member of o with an override's key takes its
// value in place, and the overrides o lacks follow in their order.
func (o *object) encodeWith(over []member) json.RawMessage {
	n := 2
	for _, m := range o.members {
		n += len(m.rawKey) + len(m.key) + len(m.value) + 4
	}
	for _, m := range over {
		n += len(m.key) + len(m.value) + 4
	}
	b := make([]byte, 0, n)
	b = append(b, '{')
	var used uint64 // over is a handful of keys
	for i, m := range o.members {
		for j := range over {
			if over[j].key == m.key {
				m.value = over[j].value
				used |= 1 << j
				break
			}
		}
		if i > 0 {
			b = append(b, ',')
		}
		b = appendKey(b, &m)
		b = append(b, ':')
		b = append(b, m.value...)
	}
	for j := range over {
		if used&(1<<j) != 0 {
			continue
		}
		if len(b) > 1 {
			b = append(b, ',')
		}
		b = appendKey(b, &over[j])
		b = append(b, ':')
		b = append(b, over[j].value...)
	}
	return append(b, '}')
}

// appendKey appends m's key as it was sent, or quoted when m was set.
func appendKey(b []byte, m *member) []byte {
	if m.rawKey != nil {
		return append(b, m.rawKey...)
	}
	return appendString(b, m.key)
}

// encode writes the object compactly, each value as held.
func (o *object) encode() json.RawMessage {
	n := 2
	for _, m := range o.members {
		n += len(m.rawKey) + len(m.key) + len(m.value) + 4
	}
	b := make([]byte, 0, n)
	b = append(b, '{')
	for i, m := range o.members {
		if i > 0 {
			b = append(b, ',')
		}
		if m.rawKey != nil {
			b = append(b, m.rawKey...)
		} else {
			b = appendString(b, m.key)
		}
		b = append(b, ':')
		b = append(b, m.value...)
	}
	return append(b, '}')
}

// parseArray splits a raw JSON array into its elements.
func parseArray(raw []byte) ([]json.RawMessage, error) {
	i := skipSpace(raw, 0)
	if i >= len(raw) || raw[i] != '[' {
		return nil, errBadJSON
	}
	var out []json.RawMessage
	i = skipSpace(raw, i+1)
	if i < len(raw) && raw[i] == ']' {
		return out, nil
	}
	for {
		j, err := skipValue(raw, i)
		if err != nil {
			return nil, err
		}
		out = append(out, raw[i:j])
		i = skipSpace(raw, j)
		if i >= len(raw) {
			return nil, errBadJSON
		}
		switch raw[i] {
		case ',':
			i = skipSpace(raw, i+1)
		case ']':
			return out, nil
		default:
			return nil, errBadJSON
		}
	}
}

// encodeArray joins raw elements into a JSON array.
func encodeArray(elems []json.RawMessage) json.RawMessage {
	n := 2
	for _, e := range elems {
		n += len(e) + 1
	}
	b := make([]byte, 0, n)
	b = append(b, '[')
	for i, e := range elems {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, e...)
	}
	return append(b, ']')
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\r' || b[i] == '\n') {
		i++
	}
	return i
}

// skipString returns the index just past the string starting at b[i].
func skipString(b []byte, i int) (int, error) {
	if j := jsontext.StringEnd(b, i); j >= 0 {
		return j, nil
	}
	return 0, errBadJSON
}

// skipValue returns the index just past the value starting at b[i].
func skipValue(b []byte, i int) (int, error) {
	if i >= len(b) {
		return 0, errBadJSON
	}
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for i < len(b) {
			switch b[i] {
			case '"':
				j, err := skipString(b, i)
				if err != nil {
					return 0, err
				}
				i = j
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1, nil
				}
			}
			i++
		}
		return 0, errBadJSON
	}
	start := i
	for i < len(b) {
		switch b[i] {
		case ',', '}', ']', ' ', '\t', '\r', '\n':
			if i == start {
				return 0, errBadJSON
			}
			return i, nil
		}
		i++
	}
	if i == start {
		return 0, errBadJSON
	}
	return i, nil
}

// decodeString reads a raw JSON string. Strings without escapes are the
// common case (and include multi-megabyte base64 images), so they skip
// encoding/json, and are not copied: the string is the bytes of raw.
// Every raw it is given lies in the copy of the body Parse made, which
// nothing writes to, so the string never changes; a string kept beyond
// the request (Request.Model) is cloned, so it does not pin the body.
func decodeString(raw []byte) (string, bool) {
	if len(raw) < 2 || raw[0] != '"' || raw[len(raw)-1] != '"' {
		raw = bytes.TrimSpace(raw)
		if len(raw) < 2 || raw[0] != '"' || raw[len(raw)-1] != '"' {
			return "", false
		}
	}
	inner := raw[1 : len(raw)-1]
	if plainShort(inner) || bytes.IndexByte(inner, '\\') < 0 && utf8.Valid(inner) {
		return unsafe.String(unsafe.SliceData(inner), len(inner)), true
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", false
	}
	return s, true
}

// shortString is the length up to which plainShort reads a string: names
// and enum values, which are most of the strings a body's check decodes,
// and for which calling bytes.IndexByte and utf8.Valid cost more than a
// loop.
const shortString = 16

// plainShort reports whether s is at most shortString bytes of printable
// ASCII without a backslash: text as it stands.
func plainShort(s []byte) bool {
	if len(s) > shortString {
		return false
	}
	for _, c := range s {
		if c < ' ' || c >= utf8.RuneSelf || c == '\\' {
			return false
		}
	}
	return true
}

// stringChars is utf8.RuneCountInString of what the raw JSON string
// decodes to, without decoding it: an escape is one character, a
// surrogate pair's two escapes one, and an invalid byte, which decoding
// makes U+FFFD, one.
func stringChars(raw []byte) int {
	raw = bytes.TrimSpace(raw)
	if len(raw) < 2 {
		return 0
	}
	inner := raw[1 : len(raw)-1]
	n := 0
	for {
		at := bytes.IndexByte(inner, '\\')
		if at < 0 {
			return n + runeCount(inner)
		}
		n += runeCount(inner[:at]) + 1
		inner = inner[at+1:]
		if len(inner) == 0 {
			return n
		}
		if inner[0] != 'u' || len(inner) < 5 {
			inner = inner[1:]
			continue
		}
		r := hex4(inner[1:5])
		inner = inner[5:]
		if utf16.IsSurrogate(r) && len(inner) >= 6 && inner[0] == '\\' && inner[1] == 'u' {
			if utf16.DecodeRune(r, hex4(inner[2:6])) != utf8.RuneError {
				inner = inner[6:]
			}
		}
	}
}

// runeCount is utf8.RuneCount, an invalid byte one character, reading
// ASCII eight bytes at a time. utf8.RuneCount reads it a byte at a time
// and, past the first other byte, converts the rest to a string, an
// allocation for each message of a conversation in another script: its
// text is counted for the context window's estimate.
func runeCount(b []byte) int {
	n := 0
	for len(b) > 0 {
		for len(b) >= 8 && binary.LittleEndian.Uint64(b)&0x8080808080808080 == 0 {
			n += 8
			b = b[8:]
		}
		switch {
		case len(b) == 0:
		case b[0] < utf8.RuneSelf:
			n++
			b = b[1:]
		default:
			_, size := utf8.DecodeRune(b)
			n++
			b = b[size:]
		}
	}
	return n
}

// hex4 is the value of four hexadecimal digits, -1 when they are not.
func hex4(b []byte) rune {
	var r rune
	for _, c := range b[:4] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c -= 'a' - 10
		case 'A' <= c && c <= 'F':
			c -= 'A' - 10
		default:
			return -1
		}
		r = r<<4 | rune(c)
	}
	return r
}

// appendString appends s as a JSON string. HTML characters are left as
// they are: the text goes to an engine, not a browser.
func appendString(b []byte, s string) []byte {
	plain := true
	for i := 0; i < len(s) && plain; i++ {
		plain = s[i] >= ' ' && s[i] < utf8.RuneSelf && s[i] != '"' && s[i] != '\\'
	}
	if plain { // the keys Prepare sets, and most text
		b = append(b, '"')
		b = append(b, s...)
		return append(b, '"')
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(s); err != nil { // cannot happen for a string
		return append(b, `""`...)
	}
	return append(b, bytes.TrimSuffix(buf.Bytes(), []byte("\n"))...)
}

// marshalInt is n as a JSON number.
func marshalInt(n int) json.RawMessage { return strconv.AppendInt(nil, int64(n), 10) }
