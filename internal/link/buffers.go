package link

import (
	"sync"

	"github.com/fasthttp/websocket"
)

// Buffers lends links the buffers they move messages through, each for
// one message: a link between messages holds none, however large its last
// message was. A gateway with thousands of mostly idle worker links then
// holds about as many buffers as it has messages in flight, not a few per
// link. One Buffers serves any number of links; the zero value is ready.
type Buffers struct {
	writes  sync.Pool // the websocket's frame buffers (WritePool)
	reads   sync.Pool // *[]byte: where ReadMessage reads a message
	batches sync.Pool // *[]byte: where a session queues frames to write
}

// WritePool is for the websocket Upgrader's or Dialer's WriteBufferPool:
// a connection then takes a write buffer for each message it sends.
func (b *Buffers) WritePool() websocket.BufferPool { return &b.writes }

// WebSocket is the package's WebSocket, reading messages through b.
func (b *Buffers) WebSocket(ws *websocket.Conn, ka Keepalive) Conn {
	return newWebSocket(ws, ka, b)
}

func (b *Buffers) read() *[]byte {
	if p, ok := b.reads.Get().(*[]byte); ok {
		return p
	}
	return new([]byte)
}

func (b *Buffers) batch() []byte {
	if p, ok := b.batches.Get().(*[]byte); ok {
		return (*p)[:0]
	}
	return make([]byte, 0, 4<<10)
}

func (b *Buffers) putBatch(buf []byte) { b.batches.Put(&buf) }
