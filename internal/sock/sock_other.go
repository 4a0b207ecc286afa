//go:build !linux

package sock

const supported = false

func (c *Conn) readNow(uintptr) bool  { return true }
func (c *Conn) writeNow(uintptr) bool { return true }
