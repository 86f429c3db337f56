// Package nbd is a Network Block Device server: the fixed newstyle
// handshake and the transmission phase with simple replies, as the NBD
// protocol document (github.com/NetworkBlockDevice/nbd, doc/proto.md)
// specifies them. It serves Exports, each a Device; what a Device stores
// and how is the caller's. qemu-img, qemu-nbd clients, nbdcopy, fio's nbd
// engine and the Linux nbd client speak to it.
package nbd

import "strconv"

// Handshake magic numbers (proto.md "Newstyle negotiation").
const (
	magicNBD       = 0x4e42444d41474943 // "NBDMAGIC"
	magicIHaveOpt  = 0x49484156454f5054 // "IHAVEOPT"
	magicOptReply  = 0x0003e889045565a9
	magicRequest   = 0x25609513
	magicSimpleRep = 0x67446698
)

// Handshake flags (server) and client flags.
const (
	flagFixedNewstyle = 1 << 0 // NBD_FLAG_FIXED_NEWSTYLE
	flagNoZeroes      = 1 << 1 // NBD_FLAG_NO_ZEROES

	clientFixedNewstyle = 1 << 0 // NBD_FLAG_C_FIXED_NEWSTYLE
	clientNoZeroes      = 1 << 1 // NBD_FLAG_C_NO_ZEROES
)

// Options (NBD_OPT_*).
const (
	optExportName     = 1
	optAbort          = 2
	optList           = 3
	optStartTLS       = 5
	optInfo           = 6
	optGo             = 7
	optStructuredRepl = 8
)

// Option reply types (NBD_REP_*); errors have bit 31 set.
const (
	repAck          = 1
	repServer       = 2
	repInfo         = 3
	repErrUnsup     = 1<<31 + 1
	repErrPolicy    = 1<<31 + 2
	repErrInvalid   = 1<<31 + 3
	repErrUnknown   = 1<<31 + 6
	repErrTooBig    = 1<<31 + 9
	maxOptionLength = 64 << 10 // option data a client may send, bytes
)

// NBD_INFO_* types of NBD_REP_INFO.
const (
	infoExport    = 0
	infoName      = 1
	infoDesc      = 2
	infoBlockSize = 3
)

// Transmission flags (NBD_FLAG_*, per export).
const (
	tflagHasFlags        = 1 << 0
	tflagReadOnly        = 1 << 1
	tflagSendFlush       = 1 << 2
	tflagSendFUA         = 1 << 3
	tflagSendTrim        = 1 << 5
	tflagSendWriteZeroes = 1 << 6
	tflagCanMultiConn    = 1 << 8
)

// Commands (NBD_CMD_*) and command flags (NBD_CMD_FLAG_*).
const (
	cmdRead        = 0
	cmdWrite       = 1
	cmdDisc        = 2
	cmdFlush       = 3
	cmdTrim        = 4
	cmdWriteZeroes = 6

	cmdFlagFUA    = 1 << 0
	cmdFlagNoHole = 1 << 1
)

// Errno is an NBD error value (proto.md "Error values"): the reply's
// error field. A Device returns one (or wraps one) to choose it; any other
// error is EIO.
type Errno uint32

// NBD error values (Linux errno numbers).
const (
	EPERM     Errno = 1
	EIO       Errno = 5
	ENOMEM    Errno = 12
	EINVAL    Errno = 22
	ENOSPC    Errno = 28
	EOVERFLOW Errno = 75
	ENOTSUP   Errno = 95
	ESHUTDOWN Errno = 108
)

func (e Errno) Error() string {
	switch e {
	case EPERM:
		return "nbd: EPERM (operation not permitted)"
	case EIO:
		return "nbd: EIO (input/output error)"
	case ENOMEM:
		return "nbd: ENOMEM"
	case EINVAL:
		return "nbd: EINVAL (invalid argument)"
	case ENOSPC:
		return "nbd: ENOSPC (no space left on device)"
	case EOVERFLOW:
		return "nbd: EOVERFLOW"
	case ENOTSUP:
		return "nbd: ENOTSUP (operation not supported)"
	case ESHUTDOWN:
		return "nbd: ESHUTDOWN (server shutting down)"
	}
	return "nbd: error " + strconv.FormatUint(uint64(e), 10)
}
