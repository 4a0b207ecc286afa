package audio

import "errors"

// ErrUnsupported reports content that is not WAV, MP3 or FLAC. Its message
// is what the gateway shows to clients, hence the capital letter.
//
//lint:ignore ST1005 clients are shown this message as it is (docs/audio.md)
var ErrUnsupported = errors.New("Unsupported audio format")

// ErrTooLong reports audio with more samples than Decode may return.
var ErrTooLong = errors.New("audio too long to decode")

// FormatError reports a file of a known format whose headers are damaged
// or unusable, or, Unsupported, a sound file in an encoding of its format
// the decoders here cannot read.
type FormatError struct {
	Format      string // api.AudioWAV, api.AudioMP3 or api.AudioFLAC
	Reason      string
	Unsupported bool
}

func (e *FormatError) Error() string {
	if e.Unsupported {
		return "cannot decode this " + e.Format + " file: " + e.Reason
	}
	return "damaged " + e.Format + " file: " + e.Reason
}

func damaged(format, reason string) *FormatError {
	return &FormatError{Format: format, Reason: reason}
}

func unsupported(format, reason string) *FormatError {
	return &FormatError{Format: format, Reason: reason, Unsupported: true}
}
