package scsi

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/gosrp/gosrp/backstore"
	"github.com/gosrp/gosrp/internal/transcript"
	"github.com/gosrp/gosrp/scsi/sense"
)

// TestTranscripts replays testdata/*.txt: multi-step, multi-nexus
// interactions with the expected status, sense and data of each step.
//
//	lu <lun> <bytes> [thin] [wce]      create a RAM logical unit and add it
//	remove-lun <lun>                   RemoveLUN
//	resize <lun> <bytes>               LogicalUnit.Resize
//	session <name>                     open a session for a new nexus
//	close <name>                       close it
//	<name>[ lun=N][ attr=ordered|hoq]: <CDB hex> [in=N] [out=<hex...>|out=zero:N] -> <expect>
//	tmf <name> <abort-task-set|clear-task-set|lun-reset|clear-aca> <lun> -> <response>
//
// <expect> is "good [len=N] [data=<hex to end of line>]", "check K/ASC/ASCQ",
// "conflict" or "condition-met"; <response> is complete, failed,
// not-supported or incorrect-lun.
func TestTranscripts(t *testing.T) {
	transcript.Run(t, "testdata/*.txt", runTranscript)
}

func runTranscript(t *testing.T, steps []transcript.Step) {
	tg := NewTarget(TargetConfig{})
	sessions := map[string]Session{}
	defer func() {
		for _, s := range sessions {
			s.Close()
		}
	}()
	tag := uint64(0)
	for _, st := range steps {
		where := st.String()
		lhs, rhs, hasExpect, f := st.Cmd, st.Want, st.HasWant, st.Fields
		switch f[0] {
		case "lu":
			lun, _ := strconv.ParseUint(f[1], 10, 64)
			size, _ := strconv.ParseInt(f[2], 10, 64)
			cfg := LUConfig{Backstore: backstore.NewRAM(size), Serial: "transcript" + f[1]}
			for _, o := range f[3:] {
				switch o {
				case "thin":
					cfg.ThinProvisioning = true
				case "wce":
					cfg.Backstore = backstore.NewFault(cfg.Backstore)
					cfg.WriteCache = true
				}
			}
			lu, err := NewLogicalUnit(cfg)
			if err != nil {
				t.Fatalf("%s: %v", where, err)
			}
			if err := tg.AddLUN(lun, lu); err != nil {
				t.Fatalf("%s: %v", where, err)
			}
		case "remove-lun":
			lun, _ := strconv.ParseUint(f[1], 10, 64)
			if err := tg.RemoveLUN(lun); err != nil {
				t.Fatalf("%s: %v", where, err)
			}
		case "resize":
			lun, _ := strconv.ParseUint(f[1], 10, 64)
			size, _ := strconv.ParseInt(f[2], 10, 64)
			if err := tg.LogicalUnit(lun).Resize(size); err != nil {
				t.Fatalf("%s: %v", where, err)
			}
		case "session":
			n := Nexus{InitiatorPortID: fmt.Sprintf("%032x", len(sessions)+1), TargetPortID: "00000000000000000000000000000001", RelativeTargetPort: 1}
			sessions[f[1]] = tg.NewSession(n)
		case "close":
			sessions[f[1]].Close()
			delete(sessions, f[1])
		case "tmf":
			fns := map[string]TMF{"abort-task-set": TMFAbortTaskSet, "clear-task-set": TMFClearTaskSet, "lun-reset": TMFLUNReset, "clear-aca": TMFClearACA}
			resps := map[string]TMFResponse{"complete": TMFComplete, "failed": TMFFailed, "not-supported": TMFNotSupported, "incorrect-lun": TMFIncorrectLUN}
			lun, _ := strconv.ParseUint(f[3], 10, 64)
			got := sessions[f[1]].TaskManagement(testCtx(t), fns[f[2]], EncodeLUN(lun), 0)
			if got != resps[rhs] {
				t.Fatalf("%s: response %d", where, got)
			}
		default:
			if !hasExpect {
				t.Fatalf("%s: no expectation", where)
			}
			head, body, _ := strings.Cut(lhs, ":")
			hf := strings.Fields(head)
			s := sessions[hf[0]]
			if s == nil {
				t.Fatalf("%s: no session %q", where, hf[0])
			}
			cmd := &Command{}
			tag++
			cmd.Tag = tag
			for _, o := range hf[1:] {
				k, v, _ := strings.Cut(o, "=")
				switch k {
				case "lun":
					n, _ := strconv.ParseUint(v, 10, 64)
					cmd.LUN = EncodeLUN(n)
				case "attr":
					cmd.Attr = map[string]TaskAttr{"ordered": TaskOrdered, "hoq": TaskHeadOfQueue}[v]
				}
			}
			var cdb []byte
			outHex := false // hex tokens after out= belong to the data-out
			for _, tok := range strings.Fields(body) {
				k, v, isOpt := strings.Cut(tok, "=")
				switch {
				case !isOpt && outHex:
					cmd.DataOut = append(cmd.DataOut, hx(tok)...)
				case !isOpt:
					cdb = append(cdb, hx(tok)...)
				case k == "in":
					n, _ := strconv.Atoi(v)
					cmd.DataIn = make([]byte, n)
				case k == "out" && strings.HasPrefix(v, "zero:"):
					n, _ := strconv.Atoi(v[5:])
					cmd.DataOut = make([]byte, n)
				case k == "out":
					cmd.DataOut, outHex = hx(v), true
				default:
					outHex = false
				}
			}
			cmd.CDB = cdb
			r := s.Execute(testCtx(t), cmd)
			checkResultValid(t, cdb, r)
			ef := strings.Fields(rhs)
			switch ef[0] {
			case "good", "condition-met":
				want := uint8(sense.StatusGood)
				if ef[0] == "condition-met" {
					want = sense.StatusConditionMet
				}
				if r.Status != want {
					t.Fatalf("%s: status %#x sense % x", where, r.Status, r.Sense)
				}
				got := cmd.DataIn[:r.DataInLen]
				for i, e := range ef[1:] {
					k, v, _ := strings.Cut(e, "=")
					switch k {
					case "len":
						if n, _ := strconv.Atoi(v); n != r.DataInLen {
							t.Fatalf("%s: data-in length %d", where, r.DataInLen)
						}
					case "data":
						want := hx(v + strings.Join(ef[2+i:], ""))
						if !bytes.Equal(got, want) {
							t.Fatalf("%s:\n got % x\nwant % x", where, got, want)
						}
					}
					if k == "data" {
						break
					}
				}
			case "check":
				var k, a, q uint8
				if _, err := fmt.Sscanf(ef[1], "%x/%x/%x", &k, &a, &q); err != nil {
					t.Fatalf("%s: %v", where, err)
				}
				if r.Status != sense.StatusCheckCondition {
					t.Fatalf("%s: status %#x", where, r.Status)
				}
				si, _ := sense.Parse(r.Sense)
				if si.Key != k || si.ASC != a || si.ASCQ != q {
					t.Fatalf("%s: sense %x/%02x/%02x", where, si.Key, si.ASC, si.ASCQ)
				}
			case "conflict":
				if r.Status != sense.StatusReservationConflict {
					t.Fatalf("%s: status %#x", where, r.Status)
				}
			default:
				t.Fatalf("%s: unknown expectation", where)
			}
		}
	}
}
