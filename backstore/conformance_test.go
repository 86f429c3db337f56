package backstore_test

import (
	"path/filepath"
	"testing"

	"github.com/gosrp/gosrp/backstore"
	"github.com/gosrp/gosrp/backstore/backstoretest"
)

func TestConformanceRAM(t *testing.T) {
	backstoretest.Run(t, func(t *testing.T, size int64) backstore.Backstore {
		return backstore.NewRAM(size)
	})
}

func TestConformanceFile(t *testing.T) {
	backstoretest.Run(t, func(t *testing.T, size int64) backstore.Backstore {
		f, err := backstore.OpenFile(filepath.Join(t.TempDir(), "lun.img"), backstore.FileOptions{Size: size})
		if err != nil {
			t.Fatal(err)
		}
		return f
	})
}
