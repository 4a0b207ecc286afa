package espeak

import (
	"bytes"
	"encoding/binary"
	"testing"
)

// chunk is one RIFF chunk with the size its header claims.
type chunk struct {
	id   string
	size uint32
	body []byte
}

// riff builds a WAVE file whose RIFF size is riffSize.
func riff(riffSize uint32, chunks ...chunk) []byte {
	var b bytes.Buffer
	b.WriteString("RIFF")
	binary.Write(&b, binary.LittleEndian, riffSize)
	b.WriteString("WAVE")
	for _, c := range chunks {
		b.WriteString(c.id)
		binary.Write(&b, binary.LittleEndian, c.size)
		b.Write(c.body)
	}
	return b.Bytes()
}

// fmtChunk is the fmt chunk of 16-bit mono PCM at 22,050 Hz, as espeak-ng
// writes it.
func fmtChunk() chunk {
	body := make([]byte, 16)
	le := binary.LittleEndian
	le.PutUint16(body[0:], 1)       // PCM
	le.PutUint16(body[2:], 1)       // mono
	le.PutUint32(body[4:], 22050)   // rate
	le.PutUint32(body[8:], 22050*2) // bytes per second
	le.PutUint16(body[12:], 2)      // block align
	le.PutUint16(body[14:], 16)     // bits
	return chunk{"fmt ", 16, body}
}

func TestFixWAVSizes(t *testing.T) {
	samples := bytes.Repeat([]byte{1, 2}, 50) // 100 bytes
	list := chunk{"LIST", 4, []byte("INFO")}
	tests := []struct {
		name string
		in   []byte
		want []byte // nil: an error
	}{{
		name: "espeak-ng to a pipe",
		in:   riff(0x7ffff024, fmtChunk(), chunk{"data", 0x7ffff000, samples}),
		want: riff(36+100, fmtChunk(), chunk{"data", 100, samples}),
	}, {
		name: "unknown sizes",
		in:   riff(0xffffffff, fmtChunk(), chunk{"data", 0xffffffff, samples}),
		want: riff(36+100, fmtChunk(), chunk{"data", 100, samples}),
	}, {
		name: "zero sizes",
		in:   riff(0, fmtChunk(), chunk{"data", 0, samples}),
		want: riff(36+100, fmtChunk(), chunk{"data", 100, samples}),
	}, {
		name: "half a sample at the end",
		in:   riff(0, fmtChunk(), chunk{"data", 0, append(samples[:len(samples):len(samples)], 7)}),
		want: riff(36+100, fmtChunk(), chunk{"data", 100, samples}),
	}, {
		name: "right already",
		in:   riff(36+100, fmtChunk(), chunk{"data", 100, samples}),
		want: riff(36+100, fmtChunk(), chunk{"data", 100, samples}),
	}, {
		name: "data shorter than the file keeps what follows",
		in:   riff(0, fmtChunk(), chunk{"data", 100, samples}, list),
		want: riff(36+100+12, fmtChunk(), chunk{"data", 100, samples}, list),
	}, {
		name: "chunk before the data",
		in:   riff(0, fmtChunk(), list, chunk{"data", 0xffffffff, samples}),
		want: riff(36+12+100, fmtChunk(), list, chunk{"data", 100, samples}),
	}, {
		name: "empty speech",
		in:   riff(0xffffffff, fmtChunk(), chunk{"data", 0xffffffff, nil}),
		want: riff(36, fmtChunk(), chunk{"data", 0, nil}),
	}, {
		name: "not RIFF",
		in:   []byte("ID3\x04 some mp3"),
	}, {
		name: "too short",
		in:   []byte("RIFF"),
	}, {
		name: "no fmt chunk",
		in:   riff(0, chunk{"data", 100, samples}),
	}, {
		name: "no data chunk",
		in:   riff(0, fmtChunk()),
	}, {
		name: "fmt chunk overruns the file",
		in:   riff(0, chunk{"fmt ", 400, fmtChunk().body}),
	}, {
		name: "chunk overruns the file",
		in:   riff(0, fmtChunk(), chunk{"LIST", 400, []byte("INFO")}),
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := fixWAVSizes(bytes.Clone(tt.in))
			if tt.want == nil {
				if err == nil {
					t.Fatalf("fixWAVSizes = % x, want an error", got)
				}
				return
			}
			if err != nil {
				t.Fatalf("fixWAVSizes: %v", err)
			}
			if !bytes.Equal(got, tt.want) {
				t.Errorf("fixWAVSizes =\n% x\nwant\n% x", got, tt.want)
			}
		})
	}
}
