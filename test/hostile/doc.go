// Package hostile attacks an SRP target (srp/target over rdma/iwarp, with
// the SCSI core and a RAM logical unit) from a misbehaving peer: malformed
// MPA frames and logins, FPDUs that break RFC 5041/5040 rules, SRP IUs that
// break T10 SRP r16a, slow and abandoned connections, resource exhaustion
// and abrupt resets. Each test asserts the protocol's own answer (MPA
// reject, iWARP Terminate layer/type/code, SRP_LOGIN_REJ reason, CHECK
// CONDITION sense, task management response), then that a well-behaved
// initiator is still served and that no goroutine outlives the target.
//
// The package has tests only.
package hostile
