package scsi

// Reservation hooks. PERSISTENT RESERVE IN/OUT and RESERVE/RELEASE are not
// in the opcode table yet, so they fail with INVALID COMMAND OPERATION
// CODE; no command is ever in conflict.

// reservationRows returns the opcode table rows of the reservation
// commands.
func reservationRows() []opEntry { return nil }

// checkReservation returns RESERVATION CONFLICT when the command may not
// run for its I_T nexus (SPC-4 §5.13.1, table 47).
func (lu *LogicalUnit) checkReservation(c *cmdCtx) failure { return ok }

// resetReservations releases RESERVE(6)/(10) reservations on logical unit
// reset (SPC-2 §5.5.1; persistent reservations survive).
func (lu *LogicalUnit) resetReservations() {}
