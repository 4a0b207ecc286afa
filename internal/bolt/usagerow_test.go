package bolt

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	bbolt "go.etcd.io/bbolt"

	"github.com/svc-dev/svc/internal/api"
)

// fullRow has every field set, none to its zero value.
func fullRow() api.UsageRow {
	return api.UsageRow{
		ID:                   "0190c7a2-5b1e-7c3d-8e4f-0123456789ab",
		CreatedAt:            time.Date(2026, 11, 15, 10, 0, 0, 123456789, time.UTC),
		Model:                "qwen3-8b-q4",
		RequestType:          api.RequestChat,
		StatusCode:           502,
		ErrorMessage:         ptr("worker lost: \"gpu\" ✗"),
		PromptTokens:         4000,
		CompletionTokens:     1000,
		TotalTokens:          5001, // not the sum: stored explicitly
		RequestDurationMs:    20_000,
		TimeToFirstTokenMs:   ptr(int64(800)),
		TokensPerSecond:      ptr(119.87654321),
		WorkerID:             "wk_0123456789abcdef",
		WorkerName:           "gpu-box-07",
		DraftAcceptanceRate:  ptr(0.625),
		AudioSeconds:         ptr(12.25),
		AudioFormat:          ptr("wav"),
		ReasoningTokens:      ptr(300),
		CachedTokens:         ptr(1024),
		QueueWaitMs:          ptr(int64(40)),
		WorkerQueueWaitMs:    ptr(int64(15)),
		ModelLoadMs:          ptr(int64(9000)),
		ColdStart:            true,
		TokensEstimated:      true,
		Stream:               true,
		Images:               2,
		Notice:               ptr("context_trimmed"),
		ModerationOutcome:    ptr("flagged"),
		ModerationCategories: []string{"S1", "", "S10"},
		Attempts:             3,
		EnergyWh:             ptr(1.5e-3),
		SpeechSeconds:        ptr(3.75),
		APIKeyID:             "k3f9a1c2b7d4",
	}
}

func TestUsageRowRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		row  func(r *api.UsageRow)
	}{
		{"every field set", func(*api.UsageRow) {}},
		{"every nullable nil, every other field zero", func(r *api.UsageRow) { *r = api.UsageRow{} }},
		{"every nullable nil", func(r *api.UsageRow) {
			r.ErrorMessage, r.TimeToFirstTokenMs, r.TokensPerSecond, r.DraftAcceptanceRate = nil, nil, nil, nil
			r.AudioSeconds, r.AudioFormat, r.ReasoningTokens, r.CachedTokens = nil, nil, nil, nil
			r.QueueWaitMs, r.WorkerQueueWaitMs, r.ModelLoadMs, r.Notice = nil, nil, nil, nil
			r.ModerationOutcome, r.ModerationCategories, r.EnergyWh = nil, nil, nil
		}},
		{"nullables set to zero values", func(r *api.UsageRow) {
			r.ErrorMessage, r.TimeToFirstTokenMs, r.TokensPerSecond, r.DraftAcceptanceRate = ptr(""), ptr(int64(0)), ptr(0.0), ptr(0.0)
			r.AudioSeconds, r.AudioFormat, r.ReasoningTokens, r.CachedTokens = ptr(0.0), ptr(""), ptr(0), ptr(0)
			r.QueueWaitMs, r.WorkerQueueWaitMs, r.ModelLoadMs, r.Notice = ptr(int64(0)), ptr(int64(0)), ptr(int64(0)), ptr("")
			r.ModerationOutcome, r.EnergyWh = ptr(""), ptr(0.0)
		}},
		{"empty category list is not null", func(r *api.UsageRow) { r.ModerationCategories = []string{} }},
		{"total is the sum", func(r *api.UsageRow) { r.TotalTokens = r.PromptTokens + r.CompletionTokens }},
		{"extreme integers", func(r *api.UsageRow) {
			r.StatusCode, r.PromptTokens, r.CompletionTokens = -1, math.MaxInt, math.MinInt
			r.RequestDurationMs, r.TimeToFirstTokenMs, r.ModelLoadMs = math.MinInt64, ptr(int64(math.MaxInt64)), ptr(int64(-5))
			r.Images, r.Attempts, r.ReasoningTokens = -7, math.MaxInt, ptr(math.MinInt)
		}},
		{"extreme floats", func(r *api.UsageRow) {
			r.TokensPerSecond, r.EnergyWh, r.AudioSeconds = ptr(math.SmallestNonzeroFloat64), ptr(-math.MaxFloat64), ptr(math.Copysign(0, -1))
		}},
		{"times", func(r *api.UsageRow) { r.CreatedAt = time.Date(1969, 12, 31, 23, 59, 59, 999999999, time.UTC) }},
		{"zero time", func(r *api.UsageRow) { r.CreatedAt = time.Time{} }},
		{"year 9999", func(r *api.UsageRow) { r.CreatedAt = time.Date(9999, 12, 31, 23, 59, 59, 1, time.UTC) }},
		{"unknown request type", func(r *api.UsageRow) { r.RequestType = "rerank" }},
		{"every known request type", nil}, // below
		{"upper-case UUID stays inline", func(r *api.UsageRow) { r.ID = strings.ToUpper(r.ID) }},
		{"UUID-shaped but not hex", func(r *api.UsageRow) { r.ID = "0190c7a2-5b1e-7c3d-8e4f-0123456789ag" }},
		{"UUID without dashes", func(r *api.UsageRow) { r.ID = "0190c7a25b1e7c3d8e4f0123456789ab" }},
		{"non-UUID id", func(r *api.UsageRow) { r.ID = "rid-1" }},
		{"worker id with upper-case hex", func(r *api.UsageRow) { r.WorkerID = "wk_0123456789ABCDEF" }},
		{"worker id of another shape", func(r *api.UsageRow) { r.WorkerID = "w-03" }},
		{"worker id too long", func(r *api.UsageRow) { r.WorkerID = "wk_0123456789abcdef0" }},
		{"no worker", func(r *api.UsageRow) { r.WorkerID, r.WorkerName = "", "" }},
		{"long strings", func(r *api.UsageRow) { r.ErrorMessage = ptr(strings.Repeat("é", 5000)) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rows := []api.UsageRow{}
			if tt.row == nil {
				for _, typ := range requestTypes() {
					r := fullRow()
					r.RequestType = typ
					rows = append(rows, r)
				}
			} else {
				r := fullRow()
				tt.row(&r)
				rows = append(rows, r)
			}
			for _, want := range rows {
				enc := appendUsageRow(nil, &want)
				got, err := decodeUsageRow(enc)
				if err != nil {
					t.Fatalf("decode %x: %v", enc, err)
				}
				if !reflect.DeepEqual(got, want) {
					t.Fatalf("round trip:\n got %+v\nwant %+v", got, want)
				}
				// What the API answers is the same too (NaN aside, which
				// Record never stores, the JSON equals).
				gj, _ := json.Marshal(got)
				wj, _ := json.Marshal(want)
				if !bytes.Equal(gj, wj) {
					t.Fatalf("JSON differs:\n got %s\nwant %s", gj, wj)
				}
				// Every prefix is refused, never misread.
				for i := range enc {
					if _, err := decodeUsageRow(enc[:i]); err == nil {
						t.Fatalf("prefix of %d of %d bytes decoded", i, len(enc))
					}
				}
			}
		})
	}
}

// TestUsageRowLayout pins version 1 byte for byte: stored rows are never
// rewritten, so a change here must be a new version.
func TestUsageRowLayout(t *testing.T) {
	r := api.UsageRow{
		ID:                   "0190c7a2-5b1e-7c3d-8e4f-0123456789ab",
		CreatedAt:            time.Unix(1_700_000_000, 5).UTC(),
		Model:                "m",
		RequestType:          api.RequestEmbeddings,
		StatusCode:           200,
		PromptTokens:         3,
		CompletionTokens:     1,
		TotalTokens:          4,
		RequestDurationMs:    40,
		WorkerID:             "wk_0123456789abcdef",
		WorkerName:           "w",
		Attempts:             1,
		APIKeyID:             "k",
		Stream:               true,
		ErrorMessage:         ptr("e"),
		TokensPerSecond:      ptr(0.5),
		ModerationCategories: []string{"S1"},
	}
	want := strings.Join([]string{
		"01",                               // version
		"d78040",                           // flags: stream, worker packed, id packed, error, tokens/s, categories
		"0123456789abcdef",                 // worker id
		"0190c7a25b1e7c3d8e4f0123456789ab", // id
		"80c49fd50c", "05",                 // seconds (zig-zag), nanoseconds
		"016d",         // model "m"
		"02",           // request type 2: embeddings
		"9003060250",   // status 200, prompt 3, completion 1, (total implied), duration 40
		"0002",         // images 0, attempts 1
		"0177", "016b", // worker name "w", key "k"
		"0165",             // error message "e"
		"000000000000e03f", // tokens per second 0.5
		"01025331",         // one category, "S1"
	}, "")
	got := hex.EncodeToString(appendUsageRow(nil, &r))
	if got != want {
		t.Fatalf("layout\n got %s\nwant %s", got, want)
	}
	// A bit added later goes last, its field after every other: a row
	// without it reads as before.
	r = api.UsageRow{ID: "x", CreatedAt: time.Unix(1, 0).UTC(), RequestType: api.RequestSpeech, SpeechSeconds: ptr(2.0)}
	want = strings.Join([]string{
		"01",         // version
		"80808001",   // flags: speech seconds alone (bit 21)
		"00", "0178", // worker "" (not packed), id "x"
		"02", "00", "00", "04", // seconds 1, nanoseconds 0, model "", type 4: speech
		"000000000000", "0000", // status, prompt, completion, duration, images, attempts; names
		"0000000000000040", // speech seconds 2.0
	}, "")
	if got := hex.EncodeToString(appendUsageRow(nil, &r)); got != want {
		t.Fatalf("layout with speech seconds\n got %s\nwant %s", got, want)
	}
}

// TestUsageRowReadsJSON: rows stored before the compact layout are JSON,
// and are never rewritten.
func TestUsageRowReadsJSON(t *testing.T) {
	for _, want := range []api.UsageRow{fullRow(), {}} {
		data, err := json.Marshal(want)
		if err != nil {
			t.Fatal(err)
		}
		got, err := decodeUsageRow(data)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Fatalf("JSON row = %+v, %v; want %+v", got, err, want)
		}
	}
	if _, err := decodeUsageRow([]byte(`{"id": `)); err == nil {
		t.Fatal("truncated JSON decoded")
	}
}

func TestUsageRowRefusesWhatItCannotRead(t *testing.T) {
	r := fullRow()
	enc := appendUsageRow(nil, &r)
	withFlags := func(flags uint64) []byte {
		b := []byte{usageRowVersion}
		b = binary.AppendUvarint(b, flags)
		return b
	}
	for name, v := range map[string][]byte{
		"empty":           nil,
		"unknown version": append([]byte{2}, enc[1:]...),
		"trailing bytes":  append(bytes.Clone(enc), 0),
		"unknown flag":    withFlags(rowFlagsEnd),
		"huge flags":      append([]byte{usageRowVersion}, bytes.Repeat([]byte{0xff}, 11)...),
	} {
		if _, err := decodeUsageRow(v); err == nil {
			t.Errorf("%s: decoded", name)
		}
	}
}

// TestUsageOldJSONRowsStillListed: a store from before the compact layout
// keeps its JSON rows, listed and filtered among new compact ones.
func TestUsageOldJSONRowsStillListed(t *testing.T) {
	s, err := Open(t.TempDir(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	w := s.NewWriter(WriterOptions{})
	u := s.Usage(w)
	var want []api.UsageRow // oldest first
	for i := range 6 {
		r := fullRow()
		r.ID = "old-" + string(rune('a'+i))
		r.CreatedAt = usageNow.Add(time.Duration(i) * time.Minute)
		if i%2 == 1 {
			r.WorkerID, r.WorkerName = "w-1", "named" // w-1 is a prefix of w-12
		}
		if i == 4 {
			r.WorkerID = "w-12"
		}
		want = append(want, r)
	}
	// The first three as an old build stored them.
	err = s.db.Update(func(tx *bbolt.Tx) error {
		for i, r := range want[:3] {
			data, err := json.Marshal(r)
			if err != nil {
				return err
			}
			if err := tx.Bucket(bucketUsageRows).Put(timeKey("o", r.CreatedAt, uint64(i)), data); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range want[3:] {
		u.Record("o", r)
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	for _, worker := range []string{"", "w-1", "w-12", "wk_0123456789abcdef", "wk_0123456789abcdee", "nobody"} {
		got, err := u.Logs("o", UsageQuery{Limit: 10, WorkerID: worker})
		if err != nil {
			t.Fatal(err)
		}
		var exp []api.UsageRow
		for i := len(want) - 1; i >= 0; i-- {
			if worker == "" || string(want[i].WorkerID) == worker {
				exp = append(exp, want[i])
			}
		}
		if len(got) != len(exp) || (len(exp) > 0 && !reflect.DeepEqual(got, exp)) {
			t.Fatalf("worker %q: got %d rows, want %d:\n%+v", worker, len(got), len(exp), got)
		}
	}
}

// FuzzDecodeUsageRow: whatever the bytes, decoding never panics, and what
// it decodes encodes to bytes that decode to the same row.
func FuzzDecodeUsageRow(f *testing.F) {
	for _, r := range []api.UsageRow{fullRow(), {}} {
		f.Add(appendUsageRow(nil, &r))
		j, _ := json.Marshal(r)
		f.Add(j)
	}
	r := fullRow()
	r.ID, r.WorkerID, r.RequestType = "x", "y", "z"
	f.Add(appendUsageRow(nil, &r))
	f.Add([]byte{usageRowVersion, 0xff, 0xff, 0xff, 0xff, 0x01})
	f.Fuzz(func(t *testing.T, v []byte) {
		r, err := decodeUsageRow(v)
		if _, ferr := newWorkerFilter("wk_0123456789abcdef").match(v); ferr != nil && err == nil {
			t.Fatalf("filter refuses a row that decodes: %v", ferr)
		}
		// The filters' model and status are the whole decode's.
		if model, status, merr := rowModelStatus(v); err == nil && (merr != nil || string(model) != r.Model || status != r.StatusCode) {
			t.Fatalf("rowModelStatus = %q, %d, %v; the row has %q, %d", model, status, merr, r.Model, r.StatusCode)
		}
		if err != nil || (len(v) > 0 && v[0] == '{') {
			return
		}
		enc := appendUsageRow(nil, &r)
		r2, err := decodeUsageRow(enc)
		if err != nil {
			t.Fatalf("re-encoded row does not decode: %v", err)
		}
		if enc2 := appendUsageRow(nil, &r2); !bytes.Equal(enc, enc2) {
			t.Fatalf("re-encoding differs:\n%x\n%x", enc, enc2)
		}
	})
}
