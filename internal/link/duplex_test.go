package link

import (
	"context"
	"errors"
	"io"
	"testing"
	"testing/synctest"
)

// A duplex stream's answer flows while its body is still being sent:
// the worker answers each piece as it reads it, and the gateway reads
// each answer before it sends the next piece.
func TestDuplexAnswersWhileTheBodyArrives(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPair(t, 64<<10, func(ctx context.Context, st *Stream) {
			h, body, err := st.OpenRequest(ctx)
			if err != nil || string(h) != "live" {
				t.Errorf("header %q err %v", h, err)
				return
			}
			buf := make([]byte, 100)
			total := 0
			for {
				n, err := body.Read(buf)
				total += n
				if n > 0 {
					if err := st.Send(ctx, buf[:n]); err != nil {
						return
					}
				}
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Error(err)
					return
				}
			}
			_ = st.End(ctx, []byte{byte(total)})
		})
		ctx := ctxT(t)
		st, err := p.g.OpenDuplex(ctx, []byte("live"))
		if err != nil {
			t.Fatal(err)
		}
		for _, piece := range []string{"one", "two", "three"} {
			if err := st.SendBody(ctx, []byte(piece)); err != nil {
				t.Fatal(err)
			}
			typ, msg, err := st.ReadMessage(ctx)
			if err != nil || typ != TypeData || string(msg) != piece {
				t.Fatalf("answer to %q: %v %q %v", piece, typ, msg, err)
			}
		}
		if err := st.EndBody(ctx); err != nil {
			t.Fatal(err)
		}
		typ, msg, err := st.ReadMessage(ctx)
		if err != nil || typ != TypeEnd || len(msg) != 1 || msg[0] != 11 {
			t.Fatalf("end: %v %v %v", typ, msg, err)
		}
	})
}

// A worker that ends the stream early stops the sender with ErrAnswered.
func TestDuplexSenderStopsWhenAnswered(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPair(t, 64<<10, func(ctx context.Context, st *Stream) {
			if _, _, err := st.OpenRequest(ctx); err != nil {
				return
			}
			_ = st.End(ctx, []byte("refused"))
		})
		ctx := ctxT(t)
		st, err := p.g.OpenDuplex(ctx, []byte("h"))
		if err != nil {
			t.Fatal(err)
		}
		typ, msg, err := st.ReadMessage(ctx)
		if err != nil || typ != TypeEnd || string(msg) != "refused" {
			t.Fatalf("end: %v %q %v", typ, msg, err)
		}
		big := make([]byte, 1<<20)
		if err := st.SendBody(ctx, big); !errors.Is(err, ErrAnswered) && !errors.Is(err, ErrReset) {
			t.Fatalf("SendBody after the answer: %v", err)
		}
	})
}
