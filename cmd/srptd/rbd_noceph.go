//go:build !ceph

package main

import (
	"errors"
	"log/slog"

	"github.com/gosrp/gosrp/backstore"
	"github.com/gosrp/gosrp/scsi/pr"
)

// openRBD fails: this srptd was built without librbd.
func openRBD(LUNSection, *slog.Logger) (backstore.Backstore, string, *pr.State, error) {
	return nil, "", nil, errors.New("this srptd was built without Ceph support (build it with -tags ceph,pacific)")
}
