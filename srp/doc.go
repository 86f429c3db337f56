// Package srp encodes and decodes the SCSI RDMA Protocol (SRP) information
// units (IUs) exactly as Linux ib_srp and ib_srpt put them on the wire:
// T10 SRP r16a, the SRP-2 immediate-data extensions, and the RDMA/CM login
// layout of include/scsi/srp.h (struct srp_login_req_rdma). It also holds the
// SRP port identifier, the ib_srp add_target option string, and the
// InfiniBand Device Management MAD payloads an SRP target answers.
//
// The package is raw wire format only: it knows nothing about channels,
// credits or transports (see srp/target and srp/initiator).
//
// # Conventions
//
// All multi-byte fields are big-endian. The 8-byte tag is opaque to SRP; it
// is read and written as a big-endian uint64 so that echoing the value echoes
// the bytes verbatim. LUNs are the 8-byte SAM LUN field as a big-endian
// uint64, as in package scsi.
//
// Every IU type implements [IU]. Encoders (AppendTo, Marshal) write reserved
// bytes as zero and produce exactly the Linux layout; they fail only when the
// struct cannot be represented (for example a CDB longer than 268 bytes).
// Decoders (UnmarshalXxx, (*Xxx).Unmarshal, [Decode]) are strict: a buffer
// shorter than the fixed part of the IU, or than any length the IU claims
// (descriptors, sense data, response data, immediate data), fails with a
// *[DecodeError] that names the field using the member names of the Linux
// structs (errors.As-able; errors.Is matches [ErrTruncated] or [ErrInvalid]).
// Decoders never panic and never read outside the buffer. Bytes after the
// end of a fixed-size IU are ignored (an InfiniBand CM REQ carries a 64-byte
// SRP_LOGIN_REQ in 92 bytes of private data). Reserved fields are ignored
// on input.
//
// Byte slices in decoded IUs (CDB, sense data, response data, immediate
// data) alias the input buffer; copy them before reusing it. Decoded
// descriptor lists are fresh slices, or reuse the capacity of the receiver's
// slices when decoding into an existing value with (*Xxx).Unmarshal, so a
// target that keeps one [Cmd] per receive context decodes without
// allocating.
package srp
