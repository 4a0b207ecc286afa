package link

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"io"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"testing/synctest"
)

// meteredReader yields n pseudo-random bytes and counts what was taken.
type meteredReader struct {
	rng  *rand.ChaCha8
	left int
	read atomic.Int64
}

func newMetered(n int) *meteredReader {
	return &meteredReader{rng: rand.NewChaCha8([32]byte{7}), left: n}
}

func (m *meteredReader) Read(p []byte) (int, error) {
	if m.left == 0 {
		return 0, io.EOF
	}
	p = p[:min(len(p), m.left)]
	_, _ = m.rng.Read(p)
	m.left -= len(p)
	m.read.Add(int64(len(p)))
	return len(p), nil
}

func digest(r io.Reader) ([32]byte, int64, error) {
	h := sha256.New()
	n, err := io.Copy(h, r)
	var out [32]byte
	copy(out[:], h.Sum(nil))
	return out, n, err
}

// An upload far larger than the window reaches the worker whole, while the
// gateway never reads more than a window (and the chunk it is sending)
// ahead of what the worker consumed.
func TestOpenReaderStreamsTheBody(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const size = 8 << 20
		const window = 256 << 10
		var consumed atomic.Int64
		var worst atomic.Int64
		src := newMetered(size)
		got := make(chan [32]byte, 1)
		p := newPair(t, window, func(ctx context.Context, st *Stream) {
			h, body, err := st.OpenRequest(ctx)
			if err != nil || string(h) != "upload" {
				t.Errorf("header %q err %v", h, err)
				return
			}
			hash := sha256.New()
			buf := make([]byte, 3000) // an odd size, to cross frame edges
			for {
				n, err := body.Read(buf)
				hash.Write(buf[:n])
				consumed.Add(int64(n))
				if ahead := src.read.Load() - consumed.Load(); ahead > worst.Load() {
					worst.Store(ahead)
				}
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Errorf("read body: %v", err)
					return
				}
			}
			var sum [32]byte
			copy(sum[:], hash.Sum(nil))
			got <- sum
			_ = st.End(ctx, []byte("ok"))
		})
		ctx := ctxT(t)
		st, err := p.g.OpenReader(ctx, []byte("upload"), src)
		if err != nil {
			t.Fatal(err)
		}
		_, end, err := collect(ctx, st)
		if err != nil || string(end) != "ok" {
			t.Fatalf("end %q err %v", end, err)
		}
		want, _, _ := digest(newMetered(size))
		if sum := <-got; sum != want {
			t.Fatal("the body arrived changed")
		}
		if consumed.Load() != size {
			t.Fatalf("worker read %d bytes, want %d", consumed.Load(), size)
		}
		if limit := int64(window + 3*MaxChunk); worst.Load() > limit {
			t.Fatalf("the gateway read %d bytes ahead of the worker, more than %d", worst.Load(), limit)
		}
	})
}

// A worker that answers without reading the body (a refusal) ends the
// upload: OpenReader returns and the answer is there to read.
func TestOpenReaderStopsWhenTheWorkerAnswers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPair(t, 64<<10, func(ctx context.Context, st *Stream) {
			if _, _, err := st.OpenRequest(ctx); err != nil {
				return
			}
			_ = st.End(ctx, []byte("refused"))
		})
		ctx := ctxT(t)
		src := newMetered(64 << 20)
		st, err := p.g.OpenReader(ctx, []byte("h"), src)
		if err != nil {
			t.Fatal(err)
		}
		if _, end, err := collect(ctx, st); err != nil || string(end) != "refused" {
			t.Fatalf("end %q err %v", end, err)
		}
		if src.read.Load() >= 64<<20 {
			t.Fatal("the whole body was sent to a worker that had answered")
		}
	})
}

// A cancelled upload fails at once and drops the stream on both ends.
func TestOpenReaderCancel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reading := make(chan struct{})
		p := newPair(t, 64<<10, func(ctx context.Context, st *Stream) {
			_, body, err := st.OpenRequest(ctx)
			if err != nil {
				return
			}
			close(reading)
			// Never read the body: the gateway's window fills up.
			<-ctx.Done()
			if _, err := io.Copy(io.Discard, body); err == nil {
				t.Error("reading an abandoned body succeeded")
			}
		})
		ctx, cancel := context.WithCancel(ctxT(t))
		go func() {
			<-reading
			synctest.Wait() // the gateway's window is full
			cancel()
		}()
		_, err := p.g.OpenReader(ctx, []byte("h"), newMetered(16<<20))
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v, want context.Canceled", err)
		}
		settle(t, "both ends to drop the stream", func() bool { return p.g.Streams() == 0 && p.w.Streams() == 0 })
	})
}

// A connection cut mid-upload is resumed with nothing lost or repeated.
func TestOpenReaderSurvivesADrop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const size = 2 << 20
		half := make(chan struct{})
		got := make(chan [32]byte, 1)
		p := newPair(t, 128<<10, func(ctx context.Context, st *Stream) {
			_, body, err := st.OpenRequest(ctx)
			if err != nil {
				return
			}
			first := make([]byte, size/2)
			if _, err := io.ReadFull(body, first); err != nil {
				t.Error(err)
				return
			}
			close(half)
			sum, _, err := digest(io.MultiReader(bytes.NewReader(first), body))
			if err != nil {
				t.Error(err)
				return
			}
			got <- sum
			_ = st.End(ctx, nil)
		})
		ctx := ctxT(t)
		done := make(chan error, 1)
		var st *Stream
		go func() {
			var err error
			st, err = p.g.OpenReader(ctx, []byte("h"), newMetered(size))
			done <- err
		}()
		<-half
		p.drop()
		p.connect()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		want, _, _ := digest(newMetered(size))
		if sum := <-got; sum != want {
			t.Fatal("the body changed across the drop")
		}
		if _, _, err := collect(ctx, st); err != nil {
			t.Fatal(err)
		}
	})
}

// A header larger than a frame still reaches the worker whole.
func TestOpenRequestLongHeader(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		header := bytes.Repeat([]byte("h"), 3*MaxChunk+5)
		got := make(chan []byte, 1)
		p := newPair(t, 0, func(ctx context.Context, st *Stream) {
			h, body, err := st.OpenRequest(ctx)
			if err != nil {
				t.Error(err)
				return
			}
			b, err := body.Bytes()
			if err != nil || string(b) != "body" {
				t.Errorf("body %q err %v", b, err)
			}
			got <- h
			_ = st.End(ctx, nil)
		})
		ctx := ctxT(t)
		if _, err := p.g.OpenReader(ctx, header, bytes.NewReader([]byte("body"))); err != nil {
			t.Fatal(err)
		}
		if h := <-got; !bytes.Equal(h, header) {
			t.Fatalf("header of %d bytes arrived as %d", len(header), len(h))
		}
	})
}

// An empty body is a request with nothing after the header.
func TestOpenReaderEmptyBody(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		got := make(chan string, 1)
		p := newPair(t, 0, func(ctx context.Context, st *Stream) {
			h, body, err := st.OpenRequest(ctx)
			if err != nil {
				return
			}
			b, _ := io.ReadAll(body)
			got <- string(h) + "|" + string(b)
			_ = st.End(ctx, nil)
		})
		if _, err := p.g.OpenReader(ctxT(t), []byte("only"), bytes.NewReader(nil)); err != nil {
			t.Fatal(err)
		}
		if g := <-got; g != "only|" {
			t.Fatalf("got %q", g)
		}
	})
}
