package link

import (
	"errors"
	"io"
	"sync"
	"time"

	"github.com/fasthttp/websocket"
)

// Conn is one connection of a link: it moves whole messages, each holding
// one or more frames. ReadMessage is called from one goroutine and
// WriteMessage from another; Close may be called from anywhere.
type Conn interface {
	ReadMessage() ([]byte, error)
	WriteMessage([]byte) error
	Close() error
}

// Keepalive tunes a websocket connection's liveness checks.
type Keepalive struct {
	// Ping is how often to send a ping.
	Ping time.Duration
	// Timeout is how long a connection may go without receiving anything
	// (messages or pongs) before it is considered dead.
	Timeout time.Duration
	// WriteTimeout bounds one write.
	WriteTimeout time.Duration
}

// DefaultKeepalive notices a dead peer within about 15 seconds.
func DefaultKeepalive() Keepalive {
	return Keepalive{Ping: 5 * time.Second, Timeout: 15 * time.Second, WriteTimeout: 10 * time.Second}
}

// wsConn adapts a websocket to Conn and keeps it alive with pings.
type wsConn struct {
	ws   *websocket.Conn
	ka   Keepalive
	stop chan struct{}
	once sync.Once
	done chan struct{} // closed when the ping loop has returned
	// scratch is where ReadMessage reads a message before copying it out:
	// reused, it grows once to the largest message, instead of a read
	// growing a fresh buffer step by step for every message. With bufs it
	// is borrowed from there for each message instead.
	scratch []byte
	bufs    *Buffers
}

// WebSocket wraps an established websocket. It starts a ping loop that
// stops when the connection is closed.
func WebSocket(ws *websocket.Conn, ka Keepalive) Conn { return newWebSocket(ws, ka, nil) }

func newWebSocket(ws *websocket.Conn, ka Keepalive, bufs *Buffers) Conn {
	c := &wsConn{ws: ws, ka: ka, stop: make(chan struct{}), done: make(chan struct{}), bufs: bufs}
	ws.SetReadLimit(MaxMessage)
	_ = ws.SetReadDeadline(time.Now().Add(ka.Timeout))
	ws.SetPongHandler(func(string) error { return ws.SetReadDeadline(time.Now().Add(ka.Timeout)) })
	ws.SetPingHandler(func(data string) error {
		_ = ws.SetReadDeadline(time.Now().Add(ka.Timeout))
		err := ws.WriteControl(websocket.PongMessage, []byte(data), time.Now().Add(ka.WriteTimeout))
		if errors.Is(err, websocket.ErrCloseSent) {
			return nil
		}
		return err
	})
	go c.pingLoop()
	return c
}

func (c *wsConn) pingLoop() {
	defer close(c.done)
	t := time.NewTicker(c.ka.Ping)
	defer t.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-t.C:
			if err := c.ws.WriteControl(websocket.PingMessage, nil, time.Now().Add(c.ka.WriteTimeout)); err != nil {
				_ = c.ws.Close()
				return
			}
		}
	}
}

func (c *wsConn) ReadMessage() ([]byte, error) {
	for {
		typ, r, err := c.ws.NextReader()
		if err != nil {
			return nil, err
		}
		scratch := &c.scratch
		if c.bufs != nil {
			// Taken once the message is here: an idle link holds none.
			scratch = c.bufs.read()
		}
		msg, err := readMessage(r, scratch)
		if c.bufs != nil {
			c.bufs.reads.Put(scratch)
		}
		if err != nil {
			return nil, err
		}
		_ = c.ws.SetReadDeadline(time.Now().Add(c.ka.Timeout))
		if typ == websocket.BinaryMessage {
			return msg, nil
		}
	}
}

// readMessage reads r to its end into *scratch, which it grows as needed,
// and returns an exact copy: frames alias the message until they are
// read, so it must not hold the scratch buffer or spare capacity.
func readMessage(r io.Reader, scratch *[]byte) ([]byte, error) {
	buf := (*scratch)[:0]
	defer func() { *scratch = buf[:0] }()
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
	}
	return append([]byte(nil), buf...), nil
}

func (c *wsConn) WriteMessage(msg []byte) error {
	_ = c.ws.SetWriteDeadline(time.Now().Add(c.ka.WriteTimeout))
	return c.ws.WriteMessage(websocket.BinaryMessage, msg)
}

// Close sends a close frame when it can and closes the socket. It waits
// for the ping loop, so no goroutine outlives the connection.
func (c *wsConn) Close() error {
	var err error
	c.once.Do(func() {
		close(c.stop)
		_ = c.ws.WriteControl(websocket.CloseMessage,
			websocket.FormatCloseMessage(websocket.CloseGoingAway, ""), time.Now().Add(time.Second))
		err = c.ws.Close()
		<-c.done
	})
	return err
}
