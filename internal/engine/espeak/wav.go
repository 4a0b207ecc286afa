package espeak

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// fixWAVSizes corrects, in place, the sizes in a WAV file's header that a
// writer streaming to a pipe could not know: espeak-ng --stdout writes a
// RIFF size of about 2 GiB and a data size to match, whatever it then
// speaks. A data chunk whose size is zero or past the end of the file is
// taken to run to the end, cut to whole sample frames; the RIFF size is set
// to what follows it. It returns the file, shortened by the cut.
func fixWAVSizes(wav []byte) ([]byte, error) {
	if len(wav) < 12 || string(wav[0:4]) != "RIFF" || string(wav[8:12]) != "WAVE" {
		return nil, errors.New("not a RIFF WAVE file")
	}
	le := binary.LittleEndian
	var frame int64 // bytes per sample frame, from the fmt chunk
	for off := 12; off+8 <= len(wav); {
		id, size, body := string(wav[off:off+4]), int64(le.Uint32(wav[off+4:])), off+8
		rest := int64(len(wav) - body)
		switch id {
		case "fmt ":
			if size < 16 || size > rest {
				return nil, fmt.Errorf("fmt chunk of %d bytes", size)
			}
			frame = int64(le.Uint16(wav[body+12:]))
		case "data":
			if frame == 0 {
				return nil, errors.New("no sample frame size before the data")
			}
			if size == 0 || size > rest {
				size = rest - rest%frame
				wav = wav[:int64(body)+size]
				le.PutUint32(wav[off+4:], uint32(size))
			}
			le.PutUint32(wav[4:], uint32(len(wav)-8))
			return wav, nil
		}
		if size > rest {
			return nil, fmt.Errorf("%q chunk of %d bytes overruns the file", id, size)
		}
		off = body + int(size) + int(size&1)
	}
	return nil, errors.New("no data chunk")
}
