//go:build ceph

package rbd

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/gosrp/gosrp/backstore"
	"github.com/gosrp/gosrp/backstore/backstoretest"
)

// TestConformance runs the backstore contract suite on fresh RBD images.
func TestConformance(t *testing.T) {
	conf, pool := cluster(t)
	backstoretest.Run(t, func(t *testing.T, size int64) backstore.Backstore {
		cfg := Config{ConfPath: conf, Pool: pool, Image: fmt.Sprintf("conf-%d", time.Now().UnixNano()), CreateSize: size}
		im, err := Open(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			im.Close() // the suite closed it already: ErrClosed
			removeImage(t, cfg)
		})
		return im
	})
}
