package peer

import (
	"encoding/binary"
	"fmt"

	"github.com/svc-dev/svc/internal/link"
)

// A forwarded request's stream opens with a header of its own, before the
// request's HTTP/1.1 bytes: the request id the front gave it, which the
// home uses for its usage row (the id the client sees), and the client's
// address, which the home sees as the connection's. Only replicas open
// streams on a replica link, so both are taken as they come.

// requestVersion is the header's first byte.
const requestVersion = 1

// maxField bounds each of the header's fields.
const maxField = 256

// AppendRequest appends the stream header of a request with id from the
// client at addr (host:port, or empty for none).
func AppendRequest(dst []byte, id string, addr []byte) []byte {
	dst = append(dst, requestVersion)
	dst = binary.AppendUvarint(dst, uint64(len(id)))
	dst = append(dst, id...)
	dst = binary.AppendUvarint(dst, uint64(len(addr)))
	return append(dst, addr...)
}

// ParseRequest reads a stream header made by AppendRequest. addr aliases
// b.
func ParseRequest(b []byte) (id string, addr []byte, err error) {
	if len(b) == 0 || b[0] != requestVersion {
		return "", nil, fmt.Errorf("%w: forwarded request header of unknown version", link.ErrInvalid)
	}
	b = b[1:]
	var fields [2][]byte
	for i := range fields {
		n, k := binary.Uvarint(b)
		if k <= 0 || n > maxField || n > uint64(len(b)-k) {
			return "", nil, fmt.Errorf("%w: malformed forwarded request header", link.ErrInvalid)
		}
		fields[i] = b[k : k+int(n) : k+int(n)]
		b = b[k+int(n):]
	}
	if len(b) != 0 {
		return "", nil, fmt.Errorf("%w: forwarded request header too long", link.ErrInvalid)
	}
	return string(fields[0]), fields[1], nil
}
