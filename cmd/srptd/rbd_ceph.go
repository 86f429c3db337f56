//go:build ceph

package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"time"

	"github.com/gosrp/gosrp/backstore"
	"github.com/gosrp/gosrp/backstore/rbd"
)

// rbdOpenTimeout bounds opening an RBD image: connecting to the monitors
// (10 s) and the first OSD operations.
const rbdOpenTimeout = 45 * time.Second

// openRBD opens sec's RBD image (creating it with sec.Size bytes when it is
// missing and a size is set). serial is the unit serial every gateway of the
// image presents: 16 hex digits of a hash of the cluster's fsid, the pool and
// the image's id, so the LU identity follows the image, not the host.
func openRBD(sec LUNSection) (bs backstore.Backstore, serial string, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), rbdOpenTimeout)
	defer cancel()
	im, err := rbd.Open(ctx, rbd.Config{
		ConfPath: sec.CephConf, ClientID: sec.CephClient, Keyring: sec.CephKeyring,
		Pool: sec.Pool, Image: sec.Image, CreateSize: int64(sec.Size),
	})
	if err != nil {
		return nil, "", err
	}
	id, err := im.Identity()
	if err != nil {
		im.Close()
		return nil, "", err
	}
	h := sha256.Sum256([]byte(id))
	return im, hex.EncodeToString(h[:8]), nil
}
