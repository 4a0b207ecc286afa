package server

import (
	"bytes"
	"strconv"
)

// wantsJSON reports whether an Accept header asks for speech as JSON
// rather than as WAV, the two forms there are. Each form takes the weight
// of the most specific range that matches it (application/json over
// application/* over */*; audio/wav over audio/* over */*), as HTTP has
// it. JSON is chosen when it is acceptable and weighs more than WAV, or
// as much when the header names application/json itself; otherwise, an
// empty header and one that accepts neither included, the answer is WAV.
func wantsJSON(accept []byte) bool {
	var json, wav match
	for r := range bytes.SplitSeq(accept, []byte(",")) {
		media, params, _ := bytes.Cut(r, []byte(";"))
		media = bytes.TrimSpace(media)
		q, ok := quality(params)
		if !ok {
			continue
		}
		switch {
		case bytes.EqualFold(media, []byte("*/*")):
			json.offer(1, q)
			wav.offer(1, q)
		case bytes.EqualFold(media, []byte("application/*")):
			json.offer(2, q)
		case bytes.EqualFold(media, []byte("application/json")):
			json.offer(3, q)
		case bytes.EqualFold(media, []byte("audio/*")):
			wav.offer(2, q)
		case bytes.EqualFold(media, []byte("audio/wav")), bytes.EqualFold(media, []byte("audio/x-wav")),
			bytes.EqualFold(media, []byte("audio/wave")):
			wav.offer(3, q)
		}
	}
	jq, wq := json.weight(), wav.weight()
	return jq > 0 && (jq > wq || jq == wq && json.rank == 3)
}

// match is the weight a form takes from the most specific range matching
// it: rank 3 names it, 2 its type, 1 anything; 0 is no range yet. Two
// ranges of one rank give the higher weight.
type match struct {
	rank int
	q    float64
}

func (m *match) offer(rank int, q float64) {
	if rank > m.rank || rank == m.rank && q > m.q {
		m.rank, m.q = rank, q
	}
}

// weight is the form's weight, -1 when no range matches it.
func (m match) weight() float64 {
	if m.rank == 0 {
		return -1
	}
	return m.q
}

// quality is the q parameter of a media range's parameters, 1 when it
// has none; ok is false for a q that is not a number from 0 to 1, which
// makes the range one to pass over.
func quality(params []byte) (q float64, ok bool) {
	for p := range bytes.SplitSeq(params, []byte(";")) {
		name, value, _ := bytes.Cut(p, []byte("="))
		if !bytes.EqualFold(bytes.TrimSpace(name), []byte("q")) {
			continue
		}
		q, err := strconv.ParseFloat(string(bytes.TrimSpace(value)), 64)
		if err != nil || !(q >= 0 && q <= 1) {
			return 0, false
		}
		return q, true
	}
	return 1, true
}
