package worker

import (
	"maps"
	"math"
	"slices"
	"strconv"

	"github.com/svc-dev/svc/internal/jsontext"
)

// defaultTemperature is a chat's temperature when neither the request
// nor the model's recommended values give one.
const defaultTemperature = 1.0

// withSampling gives a chat request the sampling values it leaves out, or
// sends as null: the model's recommended ones (its sampling_defaults, as
// the models list shows them) and a temperature of 1.0 where it
// recommends none. An engine left to choose would use its own defaults,
// which are not what the listing tells clients. A body that is not an
// object is returned as it is.
func withSampling(body []byte, defaults map[string]float64) []byte {
	want := make(map[string]float64, len(defaults)+1)
	for k, v := range defaults {
		if !math.IsNaN(v) && !math.IsInf(v, 0) {
			want[k] = v
		}
	}
	if _, ok := want["temperature"]; !ok {
		want["temperature"] = defaultTemperature
	}
	var s jsontext.Scanner
	s.Reset(body)
	if s.Peek() != '{' {
		return body
	}
	open := s.Offset()
	s.Open()
	type null struct {
		at  int
		key string
	}
	var nulls []null
	n := 0
	for ; s.Next(n, '}'); n++ {
		k := string(s.Name())
		if _, ok := want[k]; !ok {
			s.Skim()
			continue
		}
		at := s.Offset()
		if s.Null() {
			nulls = append(nulls, null{at, k})
			continue
		}
		delete(want, k)
	}
	if s.Bad() {
		return body
	}
	out := make([]byte, 0, len(body)+32*len(want))
	out = append(out, body[:open+1]...)
	absent := slices.Sorted(maps.Keys(want))
	for _, nl := range nulls {
		absent = slices.DeleteFunc(absent, func(k string) bool { return k == nl.key })
	}
	for i, k := range absent {
		if i > 0 {
			out = append(out, ',')
		}
		out = jsontext.AppendString(out, k)
		out = append(out, ':')
		out = strconv.AppendFloat(out, want[k], 'g', -1, 64)
	}
	if len(absent) > 0 && n > 0 {
		out = append(out, ',')
	}
	from := open + 1
	for _, nl := range nulls {
		out = append(out, body[from:nl.at]...)
		out = strconv.AppendFloat(out, want[nl.key], 'g', -1, 64)
		from = nl.at + len("null")
	}
	return append(out, body[from:]...)
}
