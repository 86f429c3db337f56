//go:build !verbs || !cgo

package verbs

import (
	"time"

	"github.com/gosrp/gosrp/rdma"
)

// Built reports whether this binary includes the verbs provider.
const Built = false

// Open fails with ErrNotBuilt: this build has no verbs support.
func Open(Config) (*Device, error) { return nil, ErrNotBuilt }

// Devices fails with ErrNotBuilt: this build has no verbs support.
func Devices() ([]DeviceInfo, error) { return nil, ErrNotBuilt }

// Device is the verbs provider's rdma.Device; in this build it cannot be
// created.
type Device struct{ rdma.Device }

// Info describes the device.
func (d *Device) Info() DeviceInfo { return DeviceInfo{} }

// DeviceFor fails with ErrNotBuilt: this build has no verbs support.
func DeviceFor(string, time.Duration) (string, error) { return "", ErrNotBuilt }
