package fleet

import (
	"slices"
	"strings"
	"time"
)

// modelIndex is the workers of one organisation that list one model. A
// request looks only at its model's index, and there at the least loaded
// workers first, so that what routing costs does not grow with the fleet.
type modelIndex struct {
	model string
	// since is when a worker of the organisation first listed the model,
	// for GET /v1/models' created: a listing polled twice gives the same
	// entry while the model stays listed.
	since time.Time
	// listed is every worker listing the model, in any state, by name
	// then id: the first online one describes the model.
	listed []*worker
	// ready is a heap of the workers that may take the model's requests
	// as far as their state says (connected, not draining, not held
	// back), in pick's order: the one a request goes to is the first of
	// them eligibleLocked lets through, when it has a free slot. Each
	// entry keeps what orders it, so that keeping the order reads no
	// worker: with thousands of workers those reads are what would cost.
	ready []entry
	// at is where each handle's entry is in ready; free are the handles
	// not in use.
	at   []int
	free []int
	// slots sums the slots of the ready workers for the model, by the
	// capability they list it with; "" counts them all.
	slots map[string]int
}

type entry struct {
	c candidate // c.max is w.slots(model) when last placed
	w *worker
	h int
}

// member is one of a worker's places in a ready heap.
type member struct {
	ix   *modelIndex
	h    int
	caps []string // the capabilities w lists the model with
}

func (ix *modelIndex) before(i, j int) bool { return less(ix.ready[i].c, ix.ready[j].c) }

func (ix *modelIndex) swap(i, j int) {
	ix.ready[i], ix.ready[j] = ix.ready[j], ix.ready[i]
	ix.at[ix.ready[i].h], ix.at[ix.ready[j].h] = i, j
}

func (ix *modelIndex) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !ix.before(i, p) {
			return
		}
		ix.swap(i, p)
		i = p
	}
}

func (ix *modelIndex) down(i int) bool {
	start, n := i, len(ix.ready)
	for {
		c := 2*i + 1
		if c >= n {
			break
		}
		if r := c + 1; r < n && ix.before(r, c) {
			c = r
		}
		if !ix.before(c, i) {
			break
		}
		ix.swap(i, c)
		i = c
	}
	return i > start
}

func (ix *modelIndex) fix(i int) {
	if !ix.down(i) {
		ix.up(i)
	}
}

func (ix *modelIndex) addSlots(caps []string, n int) {
	ix.slots[""] += n
	for _, c := range caps {
		ix.slots[c] += n
	}
}

// push adds w, listing the model with caps, and returns its handle.
func (ix *modelIndex) push(w *worker, caps []string) int {
	var h int
	if n := len(ix.free); n > 0 {
		h, ix.free = ix.free[n-1], ix.free[:n-1]
	} else {
		h = len(ix.at)
		ix.at = append(ix.at, 0)
	}
	e := entry{c: candidate{id: w.id, active: w.active, max: w.slots(ix.model), lastAssigned: w.lastAssigned}, w: w, h: h}
	ix.at[h] = len(ix.ready)
	ix.ready = append(ix.ready, e)
	ix.up(ix.at[h])
	ix.addSlots(caps, e.c.max)
	return h
}

func (ix *modelIndex) remove(m member) {
	i, last := ix.at[m.h], len(ix.ready)-1
	ix.addSlots(m.caps, -ix.ready[i].c.max)
	if i != last {
		ix.swap(i, last)
	}
	ix.ready[last] = entry{}
	ix.ready = ix.ready[:last]
	if i != last {
		ix.fix(i)
	}
	ix.free = append(ix.free, m.h)
}

// update takes in a change of w's load or slots.
func (ix *modelIndex) update(m member, w *worker) {
	i := ix.at[m.h]
	c := &ix.ready[i].c
	if s := w.slots(ix.model); s != c.max {
		ix.addSlots(m.caps, s-c.max)
		c.max = s
	}
	c.active, c.lastAssigned = w.active, w.lastAssigned
	ix.fix(i)
}

// seek visits the ready workers in pick's order, least loaded first, and
// returns the first at which stop says to, or nil. A request visits the
// workers ahead of the one it takes and no others: a few, while most
// ready workers are eligible for it. scratch is reused between calls.
func (ix *modelIndex) seek(scratch *[]int, stop func(*worker) bool) *worker {
	n := len(ix.ready)
	if n == 0 {
		return nil
	}
	if stop(ix.ready[0].w) {
		return ix.ready[0].w
	}
	// The heap in order: a frontier of the nodes whose parents have been
	// visited, itself a heap, gives the least of the rest.
	front := (*scratch)[:0]
	defer func() { *scratch = front[:0] }()
	push := func(i int) {
		if i >= n {
			return
		}
		front = append(front, i)
		for j := len(front) - 1; j > 0; {
			p := (j - 1) / 2
			if !ix.before(front[j], front[p]) {
				break
			}
			front[j], front[p] = front[p], front[j]
			j = p
		}
	}
	pop := func() int {
		top, last := front[0], len(front)-1
		front[0] = front[last]
		front = front[:last]
		for j := 0; ; {
			c := 2*j + 1
			if c >= last {
				break
			}
			if r := c + 1; r < last && ix.before(front[r], front[c]) {
				c = r
			}
			if !ix.before(front[c], front[j]) {
				break
			}
			front[j], front[c] = front[c], front[j]
			j = c
		}
		return top
	}
	push(1)
	push(2)
	for len(front) > 0 {
		i := pop()
		if w := ix.ready[i].w; stop(w) {
			return w
		}
		push(2*i + 1)
		push(2*i + 2)
	}
	return nil
}

func (ix *modelIndex) list(w *worker) {
	i, _ := slices.BinarySearchFunc(ix.listed, w, byName)
	ix.listed = slices.Insert(ix.listed, i, w)
}

func (ix *modelIndex) unlist(w *worker) {
	if i, ok := slices.BinarySearchFunc(ix.listed, w, byName); ok {
		ix.listed = slices.Delete(ix.listed, i, i+1)
	}
}

func byName(a, b *worker) int {
	if c := strings.Compare(a.name, b.name); c != 0 {
		return c
	}
	return strings.Compare(a.id, b.id)
}

// index is a model's index in o, made when asked for.
func (o *org) index(model string, now time.Time) *modelIndex {
	ix := o.models[model]
	if ix == nil {
		ix = &modelIndex{model: model, since: now, slots: map[string]int{}}
		o.models[model] = ix
	}
	return ix
}

// reindexLocked brings w's places in o's indexes in line with its state.
// Whatever changes a worker's models, connection, draining or hold-back
// calls it; what changes only its load calls reorderLocked.
func (f *Fleet) reindexLocked(o *org, w *worker, now time.Time) {
	f.changes.Add(1)
	present := o.workers[w.id] == w
	// Listed: every model w lists while the organisation keeps it.
	for _, ix := range w.listed {
		if !present || w.model(ix.model) == nil {
			ix.unlist(w)
			if len(ix.listed) == 0 {
				delete(o.models, ix.model)
			}
		}
	}
	w.listed = w.listed[:0]
	if present {
		for i := range w.models {
			id := w.models[i].ID
			if w.model(id) != &w.models[i] {
				continue // listed twice; the first counts
			}
			ix := o.index(id, now)
			if _, ok := slices.BinarySearchFunc(ix.listed, w, byName); !ok {
				ix.list(w)
			}
			w.listed = append(w.listed, ix)
		}
	}
	// Ready: taken out and put back, at the place its state now gives.
	for _, m := range w.members {
		m.ix.remove(m)
	}
	w.members = w.members[:0]
	if present && w.attached && !w.draining && !w.pending {
		// A model the worker is held back from waits out of its ready
		// heap until the hold-back ends (unholdLocked).
		if held, until := w.heldBack(now); held {
			f.parkLocked(o, w, until)
		}
		for _, ix := range w.listed {
			if w.held(ix.model, now) {
				continue
			}
			caps := w.model(ix.model).Capabilities
			w.members = append(w.members, member{ix: ix, h: ix.push(w, caps), caps: caps})
		}
	}
	// Keys: the worker holding a private-inference key.
	key := ""
	if present && w.e2eKey != nil && !w.pending {
		key = w.e2eKey.KeyID
	}
	if key != w.keyID {
		if w.keyID != "" {
			o.keys[w.keyID] = slices.DeleteFunc(o.keys[w.keyID], func(x *worker) bool { return x == w })
			if len(o.keys[w.keyID]) == 0 {
				delete(o.keys, w.keyID)
			}
		}
		if key != "" {
			o.keys[key] = append(o.keys[key], w)
		}
		w.keyID = key
	}
}

// reorderLocked moves w to its place in its models' ready heaps after its
// load or its slots changed.
func (f *Fleet) reorderLocked(w *worker) {
	for _, m := range w.members {
		m.ix.update(m, w)
	}
}

// parkLocked notes a worker held back from a model until until, out of
// that model's ready heap: unholdLocked puts it back then.
func (f *Fleet) parkLocked(o *org, w *worker, until time.Time) {
	if !w.parked {
		w.parked = true
		o.held = append(o.held, w)
	}
	if o.nextUnhold.IsZero() || until.Before(o.nextUnhold) {
		o.nextUnhold = until
	}
}

// unholdLocked puts the workers whose hold-back has ended back in the
// ready heaps. It costs nothing until one has.
func (f *Fleet) unholdLocked(o *org, now time.Time) {
	if len(o.held) == 0 || now.Before(o.nextUnhold) {
		return
	}
	held := o.held
	o.held, o.nextUnhold = nil, time.Time{}
	for _, w := range held {
		w.parked = false
		f.reindexLocked(o, w, now)
	}
}

// anyOnline reports whether any worker of o is online.
func (o *org) anyOnline() bool {
	for _, w := range o.workers {
		if w.offlineSince.IsZero() {
			return true
		}
	}
	return false
}
