// Package pr is the reservation state machine of one SCSI logical unit:
// SPC-4 persistent reservations (§5.13; PERSISTENT RESERVE IN §6.15 and
// PERSISTENT RESERVE OUT §6.16) and SPC-2 reservations (RESERVE(6)/(10),
// RELEASE(6)/(10), SPC-2 §5.5 and §7.21–7.24), including the SPC-4 §5.13.3
// exceptions that let the two coexist (CRH=1).
//
// The package is pure: it parses CDBs and parameter lists, changes state,
// builds parameter data and reports what the caller must do as data. It never
// touches a transport, never sends a unit attention itself and never aborts a
// task; those are returned in [Effects]. It does not import package scsi, which
// calls it:
//
//	file := pr.File{Path: "/var/lib/gosrp/lun0.pr.json"}
//	st := pr.New(pr.Config{Persister: file})
//	if err := file.Restore(st); err != nil { /* corrupt image: refuse to start */ }
//	// for every command on the logical unit, before executing it:
//	if o := st.Check(pr.Nexus(nexus), pr.Classify(cdb)); !o.OK() { /* status */ }
//	// PERSISTENT RESERVE IN / OUT, RESERVE / RELEASE:
//	n, o := st.In(pr.Nexus(nexus), cdb, dataIn)
//	eff, o := st.Out(pr.Nexus(nexus), cdb, dataOut)
//	o = st.Reserve(pr.Nexus(nexus), cdb) // RESERVE(6)/(10)
//	o = st.Release(pr.Nexus(nexus), cdb) // RELEASE(6)/(10)
//	// I_T nexus loss and LOGICAL UNIT RESET:
//	st.NexusLost(pr.Nexus(nexus)); st.LUNReset()
//
// Every result is an [Outcome]: a [Reason] with the field pointer where one
// applies. [Reason.Status] and [Reason.Sense] give the SCSI status byte and the
// sense key / ASC / ASCQ, so the caller maps outcomes in one table.
//
// Model. A registration belongs to an I_T nexus (initiator port ID, target
// port ID) or, when made with ALL_TG_PT=1, to an initiator port across every
// target port; a nexus's own registration takes precedence over its
// initiator port's ALL_TG_PT registration. The persistent reservation has a
// holder registration, a type and LU_SCOPE (the only scope supported); under
// the all-registrants types (7 and 8) every registrant is a holder.
// SPEC_I_PT=1 in a REGISTER from an unregistered nexus also registers the
// initiator ports named by its TransportIDs, through the same target port.
//
// Persistence. With a [Persister] configured the logical unit is PTPL
// capable (PTPL_C=1). While the last APTPL bit received with REGISTER,
// REGISTER AND IGNORE EXISTING KEY or REGISTER AND MOVE is one, every change to
// registrations or the reservation is written through the persister before the
// command completes (SPC-4 §5.13.4); when APTPL goes back to zero the stored
// image is deleted. [State.Save] and [State.Load] give the image format.
//
// Concurrency: every method of *State may be called from many goroutines.
package pr
