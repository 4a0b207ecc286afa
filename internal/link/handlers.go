package link

import (
	"sync"
	"sync/atomic"
	"time"
)

// handlerIdle is how long a handler goroutine waits for another stream
// before it exits.
const handlerIdle = 5 * time.Second

// handlers runs the worker's stream handlers on goroutines that serve one
// stream after another. A new goroutine starts on a small stack, and every
// request's engine call grew it again: copying stacks was 6.6% of the
// worker's CPU under load. A goroutine kept between streams keeps its
// stack; one idle for handlerIdle exits, and the garbage collector shrinks
// the stacks of those waiting.
type handlers struct {
	// next hands a stream to an idle goroutine. It is unbuffered, so a
	// send succeeds only when one is waiting to take it.
	next chan func()
	stop chan struct{}
	once sync.Once
	wg   sync.WaitGroup
	// started counts the goroutines started, for tests.
	started atomic.Int64
}

func newHandlers() *handlers {
	return &handlers{next: make(chan func()), stop: make(chan struct{})}
}

// run calls h on an idle goroutine, or a new one when none waits. It must
// not be called after close.
func (p *handlers) run(h func()) {
	select {
	case p.next <- h:
		return
	default:
	}
	p.wg.Add(1)
	p.started.Add(1)
	go p.loop(h)
}

func (p *handlers) loop(h func()) {
	defer p.wg.Done()
	idle := time.NewTimer(handlerIdle)
	defer idle.Stop()
	for {
		h()
		idle.Reset(handlerIdle)
		select {
		case h = <-p.next:
		case <-idle.C:
			return
		case <-p.stop:
			return
		}
	}
}

// close lets the idle goroutines exit and waits for the busy ones to
// finish their streams.
func (p *handlers) close() {
	p.once.Do(func() { close(p.stop) })
	p.wg.Wait()
}
