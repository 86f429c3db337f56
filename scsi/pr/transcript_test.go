package pr

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/gosrp/gosrp/internal/transcript"
)

// TestTranscripts replays testdata/*.txt. Each line is
//
//	<nexus> <command> <args...> -> <expectation...>
//
// with nexuses A, B, C, D (target port 1, relative port 1) and A2, B2
// (target port 2, relative port 2). Commands:
//
//	register KEY SAKEY [aptpl] [atp]   ignore SAKEY [atp]
//	reserve KEY TYPE    release KEY TYPE    clear KEY
//	preempt KEY SAKEY TYPE    abort KEY SAKEY TYPE
//	move KEY SAKEY RTPI DEST [unreg]
//	read | write | tur | inquiry          (State.Check of that class)
//	reserve6 | release6                   (SPC-2)
//	lost | lunreset
//	keys      -> gen=N KEY...             (READ KEYS)
//	resv      -> none | KEY TYPE          (READ RESERVATION)
//
// Outcomes: OK, CONFLICT, CDB:byte.bit, PARAM:byte[.bit], PLL, BADRELEASE,
// RESOURCES. After the outcome, ua=N:ASCQ,... lists every unit attention
// (ASC 2Ah) by nexus among A..D, A2, B2, and abort=N,... the nexuses whose
// tasks are aborted; absent means none. TYPE is WR_EX, EX_AC, WR_EX_RO,
// EX_AC_RO, WR_EX_AR, EX_AC_AR or a number. Blank lines and # comments are
// ignored.
func TestTranscripts(t *testing.T) {
	transcript.Run(t, "testdata/*.txt", runTranscript)
}

var transcriptNexus = map[string]Nexus{"A": nA, "B": nB, "C": nC, "D": nD, "A2": nA2, "B2": nB2}
var transcriptOrder = []string{"A", "B", "C", "D", "A2", "B2"}

func parseType(s string) Type {
	for t := Type(0); t < 16; t++ {
		if t.String() == s {
			return t
		}
	}
	n, err := strconv.ParseUint(s, 0, 4)
	if err != nil {
		panic("bad type " + s)
	}
	return Type(n)
}

func parseKey(s string) uint64 {
	n, err := strconv.ParseUint(s, 0, 64)
	if err != nil {
		panic("bad key " + s)
	}
	return n
}

func outcomeText(o Outcome) string {
	switch o.Reason {
	case OK:
		return "OK"
	case ReservationConflict:
		return "CONFLICT"
	case InvalidFieldInCDB, InvalidFieldInParamList:
		p := "CDB"
		if o.Reason == InvalidFieldInParamList {
			p = "PARAM"
		}
		if o.BitValid {
			return fmt.Sprintf("%s:%d.%d", p, o.Byte, o.Bit)
		}
		return fmt.Sprintf("%s:%d", p, o.Byte)
	case ParamListLengthError:
		return "PLL"
	case InvalidReleaseOfPersistentReservation:
		return "BADRELEASE"
	case InsufficientRegistrationResources:
		return "RESOURCES"
	}
	return o.Reason.String()
}

func effectsText(e Effects) []string {
	var out []string
	var uas, aborts []string
	for _, name := range transcriptOrder {
		n := transcriptNexus[name]
		for _, u := range e.UnitAttentions {
			if u.To.Contains(n) {
				uas = append(uas, fmt.Sprintf("%s:%02X%02X", name, u.ASC, u.ASCQ))
			}
		}
		if abortsFor(e, n) {
			aborts = append(aborts, name)
		}
	}
	if len(uas) > 0 {
		out = append(out, "ua="+strings.Join(uas, ","))
	}
	if len(aborts) > 0 {
		out = append(out, "abort="+strings.Join(aborts, ","))
	}
	return out
}

func runTranscript(t *testing.T, steps []transcript.Step) {
	f := newFix(t, Config{Persister: &memPersister{}, TargetPort: func(r uint16) (string, bool) {
		switch r {
		case 1:
			return t1, true
		case 2:
			return t2, true
		}
		return "", false
	}})
	for _, st := range steps {
		if !st.HasWant {
			t.Fatalf("%v: no ->", st)
		}
		if got := transcriptStep(f, st.Fields); got != st.Want {
			t.Errorf("%s:%d: %s\n got: %s\nwant: %s", st.File, st.Line, st.Cmd, got, st.Want)
		}
	}
}

func transcriptStep(f *fix, w []string) string {
	switch w[0] {
	case "keys":
		gen, keys := f.keys()
		s := fmt.Sprintf("gen=%d", gen)
		for _, k := range keys {
			s += fmt.Sprintf(" %#x", k)
		}
		return s
	case "resv":
		key, typ, ok := f.resv()
		if !ok {
			return "none"
		}
		return fmt.Sprintf("%#x %v", key, typ)
	}
	n, ok := transcriptNexus[w[0]]
	if !ok {
		panic("bad nexus " + w[0])
	}
	args := w[2:]
	flag := func(name string) bool { return slices.Contains(args, name) }
	var o Outcome
	var e Effects
	switch w[1] {
	case "register":
		var fl byte
		if flag("aptpl") {
			fl |= fAPTPL
		}
		if flag("atp") {
			fl |= fAllTgPt
		}
		e, o = f.out(n, OutRegister, 0, basic(parseKey(args[0]), parseKey(args[1]), fl))
	case "ignore":
		var fl byte
		if flag("atp") {
			fl |= fAllTgPt
		}
		e, o = f.out(n, OutRegisterAndIgnoreExistingKey, 0, basic(0, parseKey(args[0]), fl))
	case "reserve":
		e, o = f.out(n, OutReserve, parseType(args[1]), basic(parseKey(args[0]), 0, 0))
	case "release":
		e, o = f.out(n, OutRelease, parseType(args[1]), basic(parseKey(args[0]), 0, 0))
	case "clear":
		e, o = f.out(n, OutClear, 0, basic(parseKey(args[0]), 0, 0))
	case "preempt", "abort":
		sa := byte(OutPreempt)
		if w[1] == "abort" {
			sa = OutPreemptAndAbort
		}
		e, o = f.out(n, sa, parseType(args[2]), basic(parseKey(args[0]), parseKey(args[1]), 0))
	case "move":
		rtpi, _ := strconv.Atoi(args[2])
		var fl byte
		if flag("unreg") {
			fl = 0x02
		}
		dst := transcriptNexus[args[3]]
		e, o = f.out(n, OutRegisterAndMove, 0, moveParams(parseKey(args[0]), parseKey(args[1]), fl, uint16(rtpi), dst.TransportID))
	case "read":
		o = f.s.Check(n, ClassRead)
	case "write":
		o = f.s.Check(n, ClassWrite)
	case "tur":
		o = f.s.Check(n, Classify([]byte{0, 0, 0, 0, 0, 0}))
	case "inquiry":
		o = f.s.Check(n, Classify([]byte{0x12, 0, 0, 0, 36, 0}))
	case "reserve6":
		o = f.s.Reserve(n, reserve6)
	case "release6":
		o = f.s.Release(n, release6)
	case "lost":
		f.s.NexusLost(n)
	case "lunreset":
		f.s.LUNReset()
	default:
		panic("bad command " + w[1])
	}
	return strings.Join(append([]string{outcomeText(o)}, effectsText(e)...), " ")
}
