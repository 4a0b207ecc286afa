package relay

// Delivery is implemented by an EventWriter that can tell how much of what
// it wrote its client received, not merely its connection took. A stream
// whose client goes away is then billed for the text the client
// acknowledged; with a plain EventWriter, for every chunk written whole.
type Delivery interface {
	// Written is how many bytes the connection has taken so far.
	Written() int64
	// Delivered is how many of them the client has acknowledged.
	Delivered() int64
}

// A stream follows the ends of its chunks not yet acknowledged: at first
// room for firstMarks, doubled while the client lags further behind, up
// to maxMarks. A client that reads keeps a few chunks in flight; one that
// stopped leaves behind what the kernel held for it (16 KB unsent on
// Linux, see the server's sendQueue) and what was in flight: a couple of
// hundred chunks.
const (
	firstMarks = 32
	maxMarks   = 4096
)

// receipts follows how much of a stream's text reached its client. A
// chunk counts once its write returned; where the writer can tell what
// the client acknowledged, a chunk counts only once every byte of it was.
type receipts struct {
	d Delivery // nil: a chunk written counts
	// chars is the text, in characters, of the chunks written whole.
	chars int
	// floor is the latest chunk known acknowledged: the connection's byte
	// count at its end and the text written by then. pending are the
	// chunks with text after it, oldest first.
	floor   mark
	pending []mark
}

type mark struct {
	end   int64
	chars int
}

// wrote notes a chunk written whole, after which chars characters of text
// had been written.
func (r *receipts) wrote(chars int) {
	if chars == r.chars {
		return
	}
	r.chars = chars
	if r.d == nil {
		return
	}
	if r.pending == nil {
		r.pending = make([]mark, 0, firstMarks)
	}
	if len(r.pending) == cap(r.pending) {
		r.settle(r.d.Delivered())
		switch {
		case len(r.pending) == maxMarks:
			// Further behind than is followed: the oldest chunk is
			// forgotten, and should the client have received it, it is
			// not billed.
			r.pending = r.pending[:copy(r.pending, r.pending[1:])]
		case 2*len(r.pending) > cap(r.pending):
			grown := make([]mark, len(r.pending), 2*cap(r.pending))
			copy(grown, r.pending)
			r.pending = grown
		}
	}
	r.pending = append(r.pending, mark{end: r.d.Written(), chars: chars})
}

// settle moves the floor to the latest chunk the client acknowledged
// whole, acked bytes being acknowledged.
func (r *receipts) settle(acked int64) {
	n := 0
	for n < len(r.pending) && r.pending[n].end <= acked {
		n++
	}
	if n > 0 {
		r.floor = r.pending[n-1]
		r.pending = r.pending[:copy(r.pending, r.pending[n:])]
	}
}

// received is the text, in characters, of the chunks the client received
// whole.
func (r *receipts) received() int {
	if r.d == nil {
		return r.chars
	}
	r.settle(r.d.Delivered())
	return r.floor.chars
}
