package srp

import (
	"errors"
	"fmt"
)

// ErrTruncated is matched (errors.Is) by a *DecodeError raised because the
// buffer ends before a field, or before data a length field claims.
var ErrTruncated = errors.New("srp: truncated")

// ErrInvalid is matched (errors.Is) by a *DecodeError raised because a field
// holds a value the protocol does not allow (wrong opcode, unsupported
// descriptor format, inconsistent descriptor counts, overflowing lengths).
var ErrInvalid = errors.New("srp: invalid field")

// DecodeError reports why a buffer is not a valid IU (or MAD, port ID,
// option string). Field is the member name of the Linux struct
// (include/scsi/srp.h, ib_dm_mad.h) or the add_target key concerned.
type DecodeError struct {
	IU     string // IU or structure name, e.g. "SRP_CMD"
	Field  string // field name, e.g. "sense_data_len"
	Offset int    // byte offset of the field within the IU, -1 if not applicable
	Need   int    // bytes needed (truncation only)
	Have   int    // bytes available (truncation only)
	Msg    string // what is wrong, for invalid values
	short  bool
}

func (e *DecodeError) Error() string {
	if e.short {
		return fmt.Sprintf("srp: %s: %s: need %d bytes, have %d", e.IU, e.Field, e.Need, e.Have)
	}
	return fmt.Sprintf("srp: %s: %s: %s", e.IU, e.Field, e.Msg)
}

// Unwrap returns ErrTruncated or ErrInvalid.
func (e *DecodeError) Unwrap() error {
	if e.short {
		return ErrTruncated
	}
	return ErrInvalid
}

func errShort(iu, field string, off, need, have int) error {
	return &DecodeError{IU: iu, Field: field, Offset: off, Need: need, Have: have, short: true}
}

func errInvalid(iu, field string, off int, format string, args ...any) error {
	return &DecodeError{IU: iu, Field: field, Offset: off, Msg: fmt.Sprintf(format, args...)}
}

// EncodeError reports an IU struct that cannot be encoded; Field names the
// offending Linux struct member.
type EncodeError struct {
	IU, Field, Msg string
}

func (e *EncodeError) Error() string {
	return fmt.Sprintf("srp: encode %s: %s: %s", e.IU, e.Field, e.Msg)
}
