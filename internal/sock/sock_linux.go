package sock

import (
	"io"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"
)

const supported = true

// cookedEvery is how often, at most, the process makes a socket call
// through the scheduler.
//
// Not more often: sysmon woken from its sleep by such a call takes it as a
// sign that Ps will be blocked in calls again soon, and polls every 20 µs
// (70 µs, with the kernel's timer slack) for 50 rounds before it backs off,
// each round a sleep and a wakeup. Taking every 32nd call of each
// connection through the scheduler, a closed loop of requests woke it so
// about 40 times a second: 2,000 sleeps a second in each process, half of
// their context switches.
//
// What it bounds is how long a busy stretch can go with sysmon asleep:
// until its next timer (it sleeps no later than the next one due), or
// cookedEvery, whichever comes first.
const cookedEvery = 100 * time.Millisecond

// checkEvery is how many of a connection's reads or writes pass between
// looks at the clock for cookedEvery.
const checkEvery = 16

// paceEpoch and lastCooked pace the calls made through the scheduler.
// They are the process's, not a connection's, because sysmon is: a call of
// any connection wakes it for all. lastCooked is the time since paceEpoch,
// on the monotonic clock, of the last such call.
var (
	paceEpoch  = time.Now()
	lastCooked atomic.Int64
)

// cook reports whether a connection's nth read or write should go through
// the scheduler.
func cook(n uint32) bool {
	return n%checkEvery == 0 && cookAt(&lastCooked, int64(time.Since(paceEpoch)))
}

// cookAt reports whether a call looking at the clock at now goes through
// the scheduler, given the time of the last that did; one call of those
// racing for a turn wins it.
func cookAt(last *atomic.Int64, now int64) bool {
	was := last.Load()
	return now-was >= int64(cookedEvery) && last.CompareAndSwap(was, now)
}

// readNow is one raw read into c.rbuf; false asks the poller to wait until
// the socket is readable and call again.
func (c *Conn) readNow(fd uintptr) bool {
	for {
		c.reads++
		n, e := call(c.reads, syscall.SYS_READ, fd, c.rbuf)
		switch e {
		case 0:
			c.rn = int(n)
			if n == 0 {
				c.rerr = io.EOF
			}
			return true
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return false
		}
		c.rerr = e
		return true
	}
}

// writeNow writes what it can of the rest of c.wbuf; false asks the poller
// to wait until the socket is writable and call again.
func (c *Conn) writeNow(fd uintptr) bool {
	for c.wn < len(c.wbuf) {
		c.writes++
		n, e := call(c.writes, syscall.SYS_WRITE, fd, c.wbuf[c.wn:])
		switch e {
		case 0:
			c.wn += int(n)
		case syscall.EINTR:
		case syscall.EAGAIN:
			return false
		default:
			c.werr = e
			return true
		}
	}
	return true
}

// call makes a read or write of p, the nth of its kind on the connection:
// raw, but through the scheduler when cook says so.
func call(n uint32, trap, fd uintptr, p []byte) (uintptr, syscall.Errno) {
	if cook(n) {
		r, _, e := syscall.Syscall(trap, fd, uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
		return r, e
	}
	r, _, e := syscall.RawSyscall(trap, fd, uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
	return r, e
}
