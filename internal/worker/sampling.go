package worker

import (
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/svc-dev/svc/internal/jsontext"
)

// defaultTemperature is a chat's temperature when neither the request
// nor the model's recommended values give one.
const defaultTemperature = 1.0

// samplingField is one sampling value withSampling may write.
type samplingField struct {
	key string
	val float64
	// given: the request has its own value; nullAt, when above 0, is
	// where the request's null for it is, to be replaced.
	given  bool
	nullAt int
}

// withSampling gives a chat request the sampling values it leaves out, or
// sends as null: the model's recommended ones (its sampling_defaults, as
// the models list shows them) and a temperature of 1.0 where it
// recommends none. An engine left to choose would use its own defaults,
// which are not what the listing tells clients. A body that is not an
// object is returned as it is.
func withSampling(body []byte, defaults map[string]float64) []byte {
	var room [8]samplingField
	want := room[:0]
	temperature := false
	for k, v := range defaults {
		if !math.IsNaN(v) && !math.IsInf(v, 0) {
			want = append(want, samplingField{key: k, val: v})
			temperature = temperature || k == "temperature"
		}
	}
	if !temperature {
		want = append(want, samplingField{key: "temperature", val: defaultTemperature})
	}
	slices.SortFunc(want, func(a, b samplingField) int { return strings.Compare(a.key, b.key) })

	var s jsontext.Scanner
	s.Reset(body)
	if s.Peek() != '{' {
		return body
	}
	open := s.Offset()
	s.Open()
	n := 0
	for ; s.Next(n, '}'); n++ {
		k := s.Name()
		i := slices.IndexFunc(want, func(f samplingField) bool { return f.key == string(k) })
		if i < 0 || want[i].given || want[i].nullAt > 0 {
			s.Skim()
			continue
		}
		at := s.Offset()
		if s.Null() {
			want[i].nullAt = at
		} else {
			want[i].given = true
		}
	}
	if s.Bad() {
		return body
	}
	out := make([]byte, 0, len(body)+32*len(want))
	out = append(out, body[:open+1]...)
	added := 0
	for _, f := range want {
		if f.given || f.nullAt > 0 {
			continue
		}
		if added > 0 {
			out = append(out, ',')
		}
		added++
		out = jsontext.AppendString(out, f.key)
		out = append(out, ':')
		out = strconv.AppendFloat(out, f.val, 'g', -1, 64)
	}
	if added > 0 && n > 0 {
		out = append(out, ',')
	}
	// The nulls replaced, in the order they come in the body.
	slices.SortFunc(want, func(a, b samplingField) int { return a.nullAt - b.nullAt })
	from := open + 1
	for _, f := range want {
		if f.nullAt == 0 {
			continue
		}
		out = append(out, body[from:f.nullAt]...)
		out = strconv.AppendFloat(out, f.val, 'g', -1, 64)
		from = f.nullAt + len("null")
	}
	return append(out, body[from:]...)
}
