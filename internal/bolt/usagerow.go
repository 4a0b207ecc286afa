package bolt

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/svc-dev/svc/internal/api"
)

// A usage row is stored in a compact binary layout rather than as JSON:
// JSON spells out 30 field names and a null for every field a request
// does not have: 791 bytes for a typical row that takes 115 here.
//
// Version 1, in order (varint: encoding/binary's zig-zag signed varint;
// uvarint: its unsigned one; string: uvarint length, then the bytes;
// f64: IEEE 754 bits, 8 bytes little-endian):
//
//	version   1 byte, 1 (JSON rows, from before, start with '{')
//	flags     uvarint, the rowFlag bits: which optional fields follow, the
//	          booleans, and which strings are packed
//	worker    WorkerID: 8 bytes when packed, else string; first, so the
//	          worker filter reads it without decoding the row
//	id        ID: 16 bytes when packed (a UUID), else string
//	time      CreatedAt: varint Unix seconds, uvarint nanoseconds (UTC)
//	model     string
//	type      RequestType: uvarint, 1 and up an entry of requestTypes,
//	          0 a string following
//	ints      varint each: StatusCode, PromptTokens, CompletionTokens,
//	          TotalTokens (only with flagTotal: else it is the sum of the
//	          two), RequestDurationMs, Images, Attempts
//	names     string each: WorkerName, APIKeyID
//	optional  each present field, in the order of its bit in rowFlag
//
// Floats stay float64: they are measurements whose exact value is what was
// reported. Model, worker name and key id stay inline. A per-store
// dictionary of them would save about 49 of a typical row's 115 bytes
// (measured on BenchmarkUsageStoreSize's rows; a row costs about 205 bytes
// of file with its key), but needs a bucket of its own, an id cache that
// must agree with whichever group commit failed, and makes a row unreadable
// on its own; the layout leaves room for it as a version 2.
const usageRowVersion = 1

// rowFlag bits. The ones most rows have come first, so their uvarint
// usually fits in two bytes. A new bit goes last, after every field
// already defined: a decoder refuses bits it does not know rather than
// misread the bytes after them, so a row that sets one is unreadable only
// to builds older than the bit, and rows that do not read as before.
const (
	flagStream            = 1 << iota
	flagWorkerPacked      // WorkerID is "wk_" and 16 lower-case hex digits, stored as 8 bytes
	flagIDPacked          // ID is a lower-case UUID, stored as 16 bytes
	flagTotal             // TotalTokens is not PromptTokens + CompletionTokens
	flagErrorMessage      // string
	flagTimeToFirstToken  // varint
	flagTokensPerSecond   // f64
	flagReasoningTokens   // varint
	flagCachedTokens      // varint
	flagQueueWait         // varint
	flagWorkerQueueWait   // varint
	flagEnergy            // f64
	flagColdStart         // boolean, nothing follows
	flagTokensEstimated   // boolean, nothing follows
	flagModelLoad         // varint
	flagDraftAcceptance   // f64
	flagNotice            // string
	flagAudioSeconds      // f64
	flagAudioFormat       // string
	flagModerationOutcome // string
	flagModerationCats    // uvarint count, then that many strings; set for an empty list too
	flagSpeechSeconds     // f64
	rowFlagsEnd
)

// requestTypes are the request types stored as a code (index + 1). A code
// names its type in every row ever written with it, so entries are only
// appended; a build that lacks one refuses the row, as any malformed one.
func requestTypes() [5]string {
	return [...]string{api.RequestChat, api.RequestEmbeddings, api.RequestAudio, api.RequestSpeech, api.RequestModeration}
}

// workerIDPrefix is how fleet.WorkerID starts: a hash's first 8 bytes in
// hex follow.
const workerIDPrefix = "wk_"

// appendUsageRow appends r's encoding to b. CreatedAt is stored as an
// instant: it decodes as UTC.
func appendUsageRow(b []byte, r *api.UsageRow) []byte {
	var flags uint64
	set := func(ok bool, f uint64) {
		if ok {
			flags |= f
		}
	}
	var worker [8]byte
	var id [16]byte
	set(r.Stream, flagStream)
	set(packWorkerID(&worker, string(r.WorkerID)), flagWorkerPacked)
	set(packUUID(&id, r.ID), flagIDPacked)
	set(r.TotalTokens != r.PromptTokens+r.CompletionTokens, flagTotal)
	set(r.ErrorMessage != nil, flagErrorMessage)
	set(r.TimeToFirstTokenMs != nil, flagTimeToFirstToken)
	set(r.TokensPerSecond != nil, flagTokensPerSecond)
	set(r.ReasoningTokens != nil, flagReasoningTokens)
	set(r.CachedTokens != nil, flagCachedTokens)
	set(r.QueueWaitMs != nil, flagQueueWait)
	set(r.WorkerQueueWaitMs != nil, flagWorkerQueueWait)
	set(r.EnergyWh != nil, flagEnergy)
	set(r.ColdStart, flagColdStart)
	set(r.TokensEstimated, flagTokensEstimated)
	set(r.ModelLoadMs != nil, flagModelLoad)
	set(r.DraftAcceptanceRate != nil, flagDraftAcceptance)
	set(r.Notice != nil, flagNotice)
	set(r.AudioSeconds != nil, flagAudioSeconds)
	set(r.AudioFormat != nil, flagAudioFormat)
	set(r.ModerationOutcome != nil, flagModerationOutcome)
	set(r.ModerationCategories != nil, flagModerationCats)
	set(r.SpeechSeconds != nil, flagSpeechSeconds)

	b = append(b, usageRowVersion)
	b = binary.AppendUvarint(b, flags)
	if flags&flagWorkerPacked != 0 {
		b = append(b, worker[:]...)
	} else {
		b = appendString(b, string(r.WorkerID))
	}
	if flags&flagIDPacked != 0 {
		b = append(b, id[:]...)
	} else {
		b = appendString(b, r.ID)
	}
	b = binary.AppendVarint(b, r.CreatedAt.Unix())
	b = binary.AppendUvarint(b, uint64(r.CreatedAt.Nanosecond()))
	b = appendString(b, r.Model)
	code := 0
	for i, t := range requestTypes() {
		if r.RequestType == t {
			code = i + 1
			break
		}
	}
	b = binary.AppendUvarint(b, uint64(code))
	if code == 0 {
		b = appendString(b, r.RequestType)
	}
	b = binary.AppendVarint(b, int64(r.StatusCode))
	b = binary.AppendVarint(b, int64(r.PromptTokens))
	b = binary.AppendVarint(b, int64(r.CompletionTokens))
	if flags&flagTotal != 0 {
		b = binary.AppendVarint(b, int64(r.TotalTokens))
	}
	b = binary.AppendVarint(b, r.RequestDurationMs)
	b = binary.AppendVarint(b, int64(r.Images))
	b = binary.AppendVarint(b, int64(r.Attempts))
	b = appendString(b, string(r.WorkerName))
	b = appendString(b, r.APIKeyID)

	// The optional fields, in bit order.
	if r.ErrorMessage != nil {
		b = appendString(b, *r.ErrorMessage)
	}
	if r.TimeToFirstTokenMs != nil {
		b = binary.AppendVarint(b, *r.TimeToFirstTokenMs)
	}
	if r.TokensPerSecond != nil {
		b = appendFloat(b, *r.TokensPerSecond)
	}
	if r.ReasoningTokens != nil {
		b = binary.AppendVarint(b, int64(*r.ReasoningTokens))
	}
	if r.CachedTokens != nil {
		b = binary.AppendVarint(b, int64(*r.CachedTokens))
	}
	if r.QueueWaitMs != nil {
		b = binary.AppendVarint(b, *r.QueueWaitMs)
	}
	if r.WorkerQueueWaitMs != nil {
		b = binary.AppendVarint(b, *r.WorkerQueueWaitMs)
	}
	if r.EnergyWh != nil {
		b = appendFloat(b, *r.EnergyWh)
	}
	if r.ModelLoadMs != nil {
		b = binary.AppendVarint(b, *r.ModelLoadMs)
	}
	if r.DraftAcceptanceRate != nil {
		b = appendFloat(b, *r.DraftAcceptanceRate)
	}
	if r.Notice != nil {
		b = appendString(b, *r.Notice)
	}
	if r.AudioSeconds != nil {
		b = appendFloat(b, *r.AudioSeconds)
	}
	if r.AudioFormat != nil {
		b = appendString(b, *r.AudioFormat)
	}
	if r.ModerationOutcome != nil {
		b = appendString(b, *r.ModerationOutcome)
	}
	if r.ModerationCategories != nil {
		b = binary.AppendUvarint(b, uint64(len(r.ModerationCategories)))
		for _, c := range r.ModerationCategories {
			b = appendString(b, c)
		}
	}
	if r.SpeechSeconds != nil {
		b = appendFloat(b, *r.SpeechSeconds)
	}
	return b
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func appendFloat(b []byte, f float64) []byte {
	return binary.LittleEndian.AppendUint64(b, math.Float64bits(f))
}

// packWorkerID stores a fleet worker id's hash in p when id is exactly
// what fleet.WorkerID makes, so that unpacking gives id back.
func packWorkerID(p *[8]byte, id string) bool {
	if len(id) != len(workerIDPrefix)+16 || id[:len(workerIDPrefix)] != workerIDPrefix {
		return false
	}
	return decodeLowerHex(p[:], id[len(workerIDPrefix):])
}

func unpackWorkerID(p []byte) string {
	b := make([]byte, len(workerIDPrefix)+16)
	copy(b, workerIDPrefix)
	hex.Encode(b[len(workerIDPrefix):], p)
	return string(b)
}

// packUUID stores id's 16 bytes in p when id is a UUID written as
// uuid.NewString writes one: lower-case hex, dashes after 8, 12, 16 and
// 20 digits.
func packUUID(p *[16]byte, id string) bool {
	if len(id) != 36 || id[8] != '-' || id[13] != '-' || id[18] != '-' || id[23] != '-' {
		return false
	}
	return decodeLowerHex(p[0:4], id[0:8]) && decodeLowerHex(p[4:6], id[9:13]) &&
		decodeLowerHex(p[6:8], id[14:18]) && decodeLowerHex(p[8:10], id[19:23]) &&
		decodeLowerHex(p[10:16], id[24:36])
}

func unpackUUID(p []byte) string {
	var b [36]byte
	hex.Encode(b[0:8], p[0:4])
	hex.Encode(b[9:13], p[4:6])
	hex.Encode(b[14:18], p[6:8])
	hex.Encode(b[19:23], p[8:10])
	hex.Encode(b[24:36], p[10:16])
	b[8], b[13], b[18], b[23] = '-', '-', '-', '-'
	return string(b[:])
}

// decodeLowerHex decodes s into dst only if hex.Encode would write s back:
// upper-case digits would come back lower-case, so they are not packed.
func decodeLowerHex(dst []byte, s string) bool {
	for i := range len(s) {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	_, err := hex.Decode(dst, []byte(s))
	return err == nil
}

var errBadRow = errors.New("malformed usage row")

// decodeUsageRow reads a row in either layout: JSON, as rows were stored
// before version 1 (they are never rewritten), or the compact one. It
// never panics, whatever v holds.
func decodeUsageRow(v []byte) (api.UsageRow, error) {
	var r api.UsageRow
	if len(v) > 0 && v[0] == '{' {
		if err := json.Unmarshal(v, &r); err != nil {
			return r, fmt.Errorf("json usage row: %w", err)
		}
		return r, nil
	}
	if len(v) == 0 || v[0] != usageRowVersion {
		return r, fmt.Errorf("%w: unknown version", errBadRow)
	}
	d := rowDecoder{b: v[1:]}
	flags := d.uvarint()
	if flags >= rowFlagsEnd {
		return r, fmt.Errorf("%w: unknown flags %#x", errBadRow, flags)
	}
	has := func(f uint64) bool { return flags&f != 0 }
	if has(flagWorkerPacked) {
		if p := d.bytes(8); p != nil {
			r.WorkerID = api.NullText(unpackWorkerID(p))
		}
	} else {
		r.WorkerID = api.NullText(d.string())
	}
	if has(flagIDPacked) {
		if p := d.bytes(16); p != nil {
			r.ID = unpackUUID(p)
		}
	} else {
		r.ID = d.string()
	}
	sec, nsec := d.varint(), d.uvarint()
	if nsec >= 1e9 {
		d.fail()
	}
	r.CreatedAt = time.Unix(sec, int64(nsec)).UTC()
	r.Model = d.string()
	types := requestTypes()
	switch code := d.uvarint(); {
	case code == 0:
		r.RequestType = d.string()
	case code <= uint64(len(types)):
		r.RequestType = types[code-1]
	default:
		d.fail()
	}
	r.StatusCode = d.int()
	r.PromptTokens = d.int()
	r.CompletionTokens = d.int()
	if has(flagTotal) {
		r.TotalTokens = d.int()
	} else {
		r.TotalTokens = r.PromptTokens + r.CompletionTokens
	}
	r.RequestDurationMs = d.varint()
	r.Images = d.int()
	r.Attempts = d.int()
	r.WorkerName = api.NullText(d.string())
	r.APIKeyID = d.string()

	r.Stream = has(flagStream)
	r.ColdStart = has(flagColdStart)
	r.TokensEstimated = has(flagTokensEstimated)
	if has(flagErrorMessage) {
		r.ErrorMessage = ptrTo(d.string())
	}
	if has(flagTimeToFirstToken) {
		r.TimeToFirstTokenMs = ptrTo(d.varint())
	}
	if has(flagTokensPerSecond) {
		r.TokensPerSecond = ptrTo(d.float())
	}
	if has(flagReasoningTokens) {
		r.ReasoningTokens = ptrTo(d.int())
	}
	if has(flagCachedTokens) {
		r.CachedTokens = ptrTo(d.int())
	}
	if has(flagQueueWait) {
		r.QueueWaitMs = ptrTo(d.varint())
	}
	if has(flagWorkerQueueWait) {
		r.WorkerQueueWaitMs = ptrTo(d.varint())
	}
	if has(flagEnergy) {
		r.EnergyWh = ptrTo(d.float())
	}
	if has(flagModelLoad) {
		r.ModelLoadMs = ptrTo(d.varint())
	}
	if has(flagDraftAcceptance) {
		r.DraftAcceptanceRate = ptrTo(d.float())
	}
	if has(flagNotice) {
		r.Notice = ptrTo(d.string())
	}
	if has(flagAudioSeconds) {
		r.AudioSeconds = ptrTo(d.float())
	}
	if has(flagAudioFormat) {
		r.AudioFormat = ptrTo(d.string())
	}
	if has(flagModerationOutcome) {
		r.ModerationOutcome = ptrTo(d.string())
	}
	if has(flagModerationCats) {
		n := d.uvarint()
		// Every category takes at least its length byte: a count beyond
		// what is left is corrupt, and must not size an allocation.
		if n > uint64(len(d.b)) {
			d.fail()
			n = 0
		}
		r.ModerationCategories = make([]string, n)
		for i := range r.ModerationCategories {
			r.ModerationCategories[i] = d.string()
		}
	}
	if has(flagSpeechSeconds) {
		r.SpeechSeconds = ptrTo(d.float())
	}
	if d.bad || len(d.b) != 0 {
		return api.UsageRow{}, errBadRow
	}
	return r, nil
}

// speechWithoutFormat is r without the audio format that rows of speech
// made before the speech_seconds field were written with: audio_format
// is a transcription's alone, and the migration that moved those rows'
// seconds left it. Rows are read through it.
func speechWithoutFormat(r api.UsageRow) api.UsageRow {
	if r.RequestType == api.RequestSpeech {
		r.AudioFormat = nil
	}
	return r
}

func ptrTo[T any](v T) *T { return &v }

// rowDecoder reads a row's fields in turn. A read past the end or a
// malformed varint marks it bad and yields zero values, so decodeUsageRow
// checks once, at the end, rather than after every field.
type rowDecoder struct {
	b   []byte
	bad bool
}

func (d *rowDecoder) fail() {
	d.bad = true
	d.b = nil
}

func (d *rowDecoder) uvarint() uint64 {
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail()
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *rowDecoder) varint() int64 {
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.fail()
		return 0
	}
	d.b = d.b[n:]
	return v
}

// int reads a varint into an int, refusing one an int cannot hold.
func (d *rowDecoder) int() int {
	v := d.varint()
	if v < math.MinInt || v > math.MaxInt {
		d.fail()
		return 0
	}
	return int(v)
}

func (d *rowDecoder) bytes(n int) []byte {
	if len(d.b) < n {
		d.fail()
		return nil
	}
	p := d.b[:n]
	d.b = d.b[n:]
	return p
}

func (d *rowDecoder) string() string {
	n := d.uvarint()
	if n > uint64(len(d.b)) {
		d.fail()
		return ""
	}
	return string(d.bytes(int(n)))
}

// raw reads a string's bytes without copying them.
func (d *rowDecoder) raw() []byte {
	n := d.uvarint()
	if n > uint64(len(d.b)) {
		d.fail()
		return nil
	}
	return d.bytes(int(n))
}

// rowModelStatus reads a stored row's model and status alone: a status or
// model filter passes over every row of an organisation's history that
// does not match, and a whole decode of each is eight times the work. The
// model's bytes are v's.
func rowModelStatus(v []byte) (model []byte, status int, err error) {
	if len(v) > 0 && v[0] == '{' {
		r, err := decodeUsageRow(v)
		return []byte(r.Model), r.StatusCode, err
	}
	if len(v) == 0 || v[0] != usageRowVersion {
		return nil, 0, fmt.Errorf("%w: unknown version", errBadRow)
	}
	d := rowDecoder{b: v[1:]}
	flags := d.uvarint()
	if flags&flagWorkerPacked != 0 {
		d.bytes(8)
	} else {
		d.raw()
	}
	if flags&flagIDPacked != 0 {
		d.bytes(16)
	} else {
		d.raw()
	}
	d.varint()
	d.uvarint()
	model = d.raw()
	if d.uvarint() == 0 {
		d.raw() // a request type of its own
	}
	status = d.int()
	if d.bad {
		return nil, 0, errBadRow
	}
	return model, status, nil
}

func (d *rowDecoder) float() float64 {
	p := d.bytes(8)
	if p == nil {
		return 0
	}
	return math.Float64frombits(binary.LittleEndian.Uint64(p))
}

// workerFilter picks a worker's rows from their stored bytes, reading no
// more of a compact row than its worker field.
type workerFilter struct {
	id string
	// packed is id as a packed row holds it; ok is false when id cannot be
	// packed, so that no packed row is id's.
	packed [8]byte
	ok     bool
	// needle is how a JSON row holds id: encoding/json writes it exactly
	// so and escapes quotes inside any other string, so a JSON row without
	// it is not id's.
	needle []byte
}

func newWorkerFilter(id string) *workerFilter {
	f := &workerFilter{id: id}
	f.ok = packWorkerID(&f.packed, id)
	q, _ := json.Marshal(id)
	f.needle = append([]byte(`"worker_id":`), q...)
	return f
}

// match reports whether the stored row v is the filter's worker's. A JSON
// row the byte search finds is confirmed by decoding it.
func (f *workerFilter) match(v []byte) (bool, error) {
	if len(v) > 0 && v[0] == '{' {
		if !bytes.Contains(v, f.needle) {
			return false, nil
		}
		r, err := decodeUsageRow(v)
		return string(r.WorkerID) == f.id, err
	}
	if len(v) == 0 || v[0] != usageRowVersion {
		return false, fmt.Errorf("%w: unknown version", errBadRow)
	}
	d := rowDecoder{b: v[1:]}
	if d.uvarint()&flagWorkerPacked != 0 {
		p := d.bytes(8)
		if d.bad {
			return false, errBadRow
		}
		return f.ok && bytes.Equal(p, f.packed[:]), nil
	}
	n := d.uvarint()
	if d.bad || n > uint64(len(d.b)) {
		return false, errBadRow
	}
	return string(d.b[:n]) == f.id, nil
}
