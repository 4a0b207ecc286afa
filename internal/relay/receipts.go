package relay

// Delivery is implemented by an EventWriter that can tell how much of what
// it wrote its client received, not merely its connection took. A stream
// whose client goes away is then billed for the text the client
// acknowledged; with a plain EventWriter, for every chunk written whole.
type Delivery interface {
	// Ends appends to dst, for each event of the last Data call that
	// wrote, the connection's byte count at the end of that event; the
	// events of one write reach the client one after another, and each
	// counts once its own bytes have.
	Ends(dst []int64) []int64
	// Delivered is how many bytes the client has acknowledged.
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
	ends    []int64 // the last write's event ends, reused
}

type mark struct {
	end   int64
	chars int
}

// wrote notes the events of a write that went out whole: by the end of
// its event i, chars[i] characters of text had been written.
func (r *receipts) wrote(chars []int) {
	if len(chars) == 0 || chars[len(chars)-1] == r.chars {
		return
	}
	before := r.chars
	r.chars = chars[len(chars)-1]
	if r.d == nil {
		return
	}
	r.ends = r.d.Ends(r.ends[:0])
	if len(r.ends) != len(chars) {
		// The writer wrote nothing for these events (a translation with
		// no output for them): their text goes with the next write's.
		r.chars = before
		return
	}
	for i, c := range chars {
		// An event without text adds no mark.
		if c != before {
			r.mark(mark{end: r.ends[i], chars: c})
			before = c
		}
	}
}

// mark follows a chunk with text until the client acknowledges it.
func (r *receipts) mark(m mark) {
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
	r.pending = append(r.pending, m)
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
