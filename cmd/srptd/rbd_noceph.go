//go:build !ceph

package main

import (
	"errors"

	"github.com/gosrp/gosrp/backstore"
)

// openRBD fails: this srptd was built without librbd.
func openRBD(LUNSection) (backstore.Backstore, string, error) {
	return nil, "", errors.New("this srptd was built without Ceph support (build it with -tags ceph,pacific)")
}
