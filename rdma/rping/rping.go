// Package rping is a client and server of the rping protocol (librdmacm's
// examples/rping.c, the RDMA ping every rdma-core installation carries) over
// the rdma transport contract, so that a process of ours and the kernel's
// (or any verbs) rping can check each other's RDMA SEND, READ and WRITE.
//
// # Protocol
//
// The connection carries no private data (rping connects with none). Each
// side registers a 16-byte receive buffer and keeps one receive posted,
// reposting it as soon as a receive completes. One ping:
//
//  1. the client fills its source buffer with the ping data (Pattern) and
//     SENDs an Info naming it (16 bytes: be64 address, be32 rkey, be32 size);
//  2. the server RDMA READs Info.Size bytes from it into its own buffer and,
//     on the READ's completion, SENDs a 16-byte go-ahead (all zero bytes: the
//     server never fills its send buffer);
//  3. the client SENDs an Info naming its sink buffer;
//  4. the server RDMA WRITEs the data read (strlen+1 bytes: the ping data is
//     a NUL-terminated string) into the sink and, on the WRITE's completion,
//     SENDs the go-ahead again;
//  5. the client compares source and sink (validation) and starts the next
//     ping, Count times (0: until stopped).
//
// A receive of any length other than 16 bytes is "bogus data" and ends the
// run, as in rping. The client ends the run by disconnecting; a server that
// sees the disconnect while waiting for the next ping's Info has succeeded.
//
// Source: rdma-core librdmacm/examples/rping.c (rping_test_client,
// rping_test_server, rping_format_send, server_recv, client_recv).
package rping

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
)

// InfoLen is the size of an Info on the wire (struct rping_rdma_info), bytes.
const InfoLen = 16

// Sizes of the ping data, bytes (rping -S).
const (
	// DefaultSize is rping's default ping size.
	DefaultSize = 64
	// MinSize is the smallest size rping accepts (RPING_MIN_BUFSIZE: room
	// for "rdma-ping-%d: " with the largest int, as sizeof strings).
	MinSize = len("2147483647") + 1 + len("rdma-ping-%d: ") + 1
	// MaxSize is the largest size rping accepts (RPING_BUFSIZE - 1).
	MaxSize = 64*1024 - 1
)

// DefaultPort is rping's default port (7174).
const DefaultPort = 7174

// Info advertises a buffer to the peer (struct rping_rdma_info, all fields
// big endian on the wire).
type Info struct {
	Addr uint64 // the buffer's address as the peer names it (rdma.MemoryRegion.Addr)
	RKey uint32 // its remote key (iWARP STag)
	Size uint32 // its length, bytes
}

// Marshal returns the 16-byte wire form: be64 Addr, be32 RKey, be32 Size.
func (i Info) Marshal() []byte {
	b := make([]byte, InfoLen)
	i.Put(b)
	return b
}

// Put writes the wire form into b[:16]; b must hold at least InfoLen bytes.
func (i Info) Put(b []byte) {
	_ = b[InfoLen-1]
	binary.BigEndian.PutUint64(b[0:8], i.Addr)
	binary.BigEndian.PutUint32(b[8:12], i.RKey)
	binary.BigEndian.PutUint32(b[12:16], i.Size)
}

// ErrBogus is returned for a message that is not exactly InfoLen bytes (rping:
// "Received bogus data").
var ErrBogus = errors.New("rping: received bogus data")

// ParseInfo decodes an Info; b must be exactly InfoLen bytes (rping checks the
// receive's byte count), else ErrBogus.
func ParseInfo(b []byte) (Info, error) {
	if len(b) != InfoLen {
		return Info{}, fmt.Errorf("%w: %d bytes, want %d", ErrBogus, len(b), InfoLen)
	}
	return Info{
		Addr: binary.BigEndian.Uint64(b[0:8]),
		RKey: binary.BigEndian.Uint32(b[8:12]),
		Size: binary.BigEndian.Uint32(b[12:16]),
	}, nil
}

// Pattern fills b with the data of ping number ping (from 0), as
// rping_test_client does: the text "rdma-ping-<ping>: ", then letters
// cycling through 'A' (65) to 'z' (122) starting at 65 + ping mod 58, the
// last byte NUL. len(b) should be at least MinSize; a shorter b holds a
// truncated prefix (as snprintf would leave it) and still ends in NUL.
func Pattern(b []byte, ping int) {
	if len(b) == 0 {
		return
	}
	text := "rdma-ping-" + strconv.Itoa(ping) + ": "
	n := copy(b, text)
	// snprintf writes at most len(b)-1 characters and a NUL; its return
	// value, the untruncated length, is where the letters start.
	if len(text) >= len(b) {
		b[len(b)-1] = 0
		return
	}
	c := byte(65 + ping%58)
	for i := n; i < len(b); i++ {
		b[i] = c
		c++
		if c > 122 {
			c = 65
		}
	}
	b[len(b)-1] = 0
}

// cstring returns b up to its first NUL (the string rping prints and whose
// strlen+1 it writes back).
func cstring(b []byte) []byte {
	for i, c := range b {
		if c == 0 {
			return b[:i]
		}
	}
	return b
}
