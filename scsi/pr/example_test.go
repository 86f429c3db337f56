package pr_test

import (
	"encoding/binary"
	"fmt"

	"github.com/gosrp/gosrp/scsi/pr"
)

// Two initiators share a logical unit; A takes a Write Exclusive
// reservation, B's writes then conflict while its reads pass.
func Example() {
	st := pr.New(pr.Config{})
	a := pr.Nexus{InitiatorPortID: "0a", TargetPortID: "t1", RelativeTargetPort: 1}
	b := pr.Nexus{InitiatorPortID: "0b", TargetPortID: "t1", RelativeTargetPort: 1}

	// PERSISTENT RESERVE OUT: CDB with service action and TYPE, and the
	// 24-byte parameter list (RESERVATION KEY, SERVICE ACTION RESERVATION KEY).
	prout := func(n pr.Nexus, sa byte, typ pr.Type, key, saKey uint64) pr.Outcome {
		cdb := []byte{pr.OpPersistentReserveOut, sa, byte(typ), 0, 0, 0, 0, 0, 24, 0}
		param := make([]byte, 24)
		binary.BigEndian.PutUint64(param[0:], key)
		binary.BigEndian.PutUint64(param[8:], saKey)
		_, o := st.Out(n, cdb, param)
		return o
	}
	fmt.Println(prout(a, pr.OutRegister, 0, 0, 0xA))
	fmt.Println(prout(b, pr.OutRegister, 0, 0, 0xB))
	fmt.Println(prout(a, pr.OutReserve, pr.WriteExclusive, 0xA, 0))

	write10 := []byte{0x2A, 0, 0, 0, 0, 0, 0, 0, 8, 0}
	read10 := []byte{0x28, 0, 0, 0, 0, 0, 0, 0, 8, 0}
	fmt.Println("A write:", st.Check(a, pr.Classify(write10)))
	fmt.Println("B write:", st.Check(b, pr.Classify(write10)), pr.ReservationConflict.Status())
	fmt.Println("B read:", st.Check(b, pr.Classify(read10)))

	// PERSISTENT RESERVE IN, READ RESERVATION: the holder's key and type.
	buf := make([]byte, 24)
	n, _ := st.In(b, []byte{pr.OpPersistentReserveIn, pr.InReadReservation, 0, 0, 0, 0, 0, 0, 24, 0}, buf)
	fmt.Printf("% x\n", buf[:n])
	// Output:
	// OK
	// OK
	// OK
	// A write: OK
	// B write: RESERVATION CONFLICT 24
	// B read: OK
	// 00 00 00 02 00 00 00 10 00 00 00 00 00 00 00 0a 00 00 00 00 00 01 00 00
}
