package initiator

import "github.com/gosrp/gosrp/scsi/sense"

// SenseError is a command that ended in CHECK CONDITION, with its sense
// data decoded by package sense (SPC-4 §4.5: fixed format 70h/71h,
// descriptor format 72h/73h). Match it with errors.As; Key, ASC, ASCQ,
// Deferred and Info come from the embedded sense.Data.
type SenseError struct {
	Status uint8 // SCSI status (normally CHECK CONDITION)
	sense.Data
	Raw []byte // the sense data as received
}

// DecodeSense decodes sense data in fixed or descriptor format, also when
// truncated. It returns nil when b is not sense data (sense.ErrNotSense).
func DecodeSense(status uint8, b []byte) *SenseError {
	d, err := sense.Parse(b)
	if err != nil {
		return nil
	}
	return &SenseError{Status: status, Data: d, Raw: b}
}

func (e *SenseError) Error() string {
	return "scsi " + sense.StatusName(e.Status) + ": " + e.Data.String()
}
