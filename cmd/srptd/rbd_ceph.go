//go:build ceph

package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"time"

	"github.com/gosrp/gosrp/backstore"
	"github.com/gosrp/gosrp/backstore/rbd"
	"github.com/gosrp/gosrp/scsi/pr"
)

// rbdOpenTimeout bounds opening an RBD image: connecting to the monitors
// (10 s) and the first OSD operations.
const rbdOpenTimeout = 45 * time.Second

// openRBD opens sec's RBD image (creating it with sec.Size bytes when it is
// missing and a size is set). serial is the unit serial every gateway of the
// image presents: 16 hex digits of a hash of the cluster's fsid, the pool and
// the image's id, so the LU identity follows the image, not the host. res is
// the logical unit's reservation state, shared with the other gateways
// through a RADOS object beside the image.
func openRBD(sec LUNSection, log *slog.Logger) (bs backstore.Backstore, serial string, res *pr.State, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), rbdOpenTimeout)
	defer cancel()
	im, err := rbd.Open(ctx, rbd.Config{
		ConfPath: sec.CephConf, ClientID: sec.CephClient, Keyring: sec.CephKeyring,
		Pool: sec.Pool, Image: sec.Image, CreateSize: int64(sec.Size),
	})
	if err != nil {
		return nil, "", nil, err
	}
	id, err := im.Identity()
	if err != nil {
		im.Close()
		return nil, "", nil, err
	}
	var st *pr.State
	store, err := im.ReservationStore(func() { st.Invalidate() }, log)
	if err != nil {
		im.Close()
		return nil, "", nil, err
	}
	st = pr.New(pr.Config{Shared: store, Logger: log})
	if err := st.Refresh(); err != nil {
		im.Close()
		return nil, "", nil, fmt.Errorf("reservations in %s: %w", store.Object(), err)
	}
	h := sha256.Sum256([]byte(id))
	return im, hex.EncodeToString(h[:8]), st, nil
}
