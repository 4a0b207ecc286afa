package server

import (
	"bytes"
	"strconv"
)

// wantsJSON reports whether an Accept header asks for speech as JSON
// rather than as WAV: application/json is acceptable (q above 0) and
// weighs at least as much as any audio type the header names. */* is
// either, so it decides nothing; without a header the answer is WAV.
func wantsJSON(accept []byte) bool {
	json, audio := -1.0, -1.0
	for r := range bytes.SplitSeq(accept, []byte(",")) {
		media, params, _ := bytes.Cut(r, []byte(";"))
		media = bytes.TrimSpace(media)
		q, ok := quality(params)
		if !ok {
			continue
		}
		switch {
		case bytes.EqualFold(media, []byte("application/json")):
			json = max(json, q)
		case len(media) > len("audio/") && bytes.EqualFold(media[:len("audio/")], []byte("audio/")):
			audio = max(audio, q)
		}
	}
	return json > 0 && json >= audio
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
