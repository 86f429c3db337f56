package main

import (
	"encoding/binary"
	"errors"
	"hash/crc32"
	"strings"
	"testing"
)

func TestVerifyBlockLayout(t *testing.T) {
	b := make([]byte, 512)
	fillVerifyBlock(b, 0x1122334455667788, 0x0102030405060708, 3)
	// The header fields at the documented offsets, big-endian.
	want := []byte{
		'g', 'o', 's', 'r', 'p', 'V', 'F', 'Y',
		0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88,
		0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08,
		0, 0, 0, 0, 0, 0, 0, 3,
	}
	if string(b[:32]) != string(want) {
		t.Fatalf("header % x, want % x", b[:32], want)
	}
	// CRC32C (Castagnoli polynomial 0x82f63b78, reflected) over the block
	// with the CRC field zero, computed bit by bit here, not with the table.
	z := append([]byte(nil), b...)
	copy(z[32:36], []byte{0, 0, 0, 0})
	crc := ^uint32(0)
	for _, c := range z {
		crc ^= uint32(c)
		for range 8 {
			if crc&1 != 0 {
				crc = crc>>1 ^ 0x82f63b78
			} else {
				crc >>= 1
			}
		}
	}
	crc = ^crc
	if got := binary.BigEndian.Uint32(b[32:]); got != crc {
		t.Errorf("CRC field %08x, want %08x", got, crc)
	}
	// The CRC32C check value of "123456789" is e3069283 (RFC 3720 B.4):
	// the table the code uses is Castagnoli's.
	if got := crc32.Checksum([]byte("123456789"), castagnoli); got != 0xe3069283 {
		t.Errorf("crc32c(123456789) = %08x", got)
	}
	// The payload depends on LBA and generation.
	b2 := make([]byte, 512)
	fillVerifyBlock(b2, 0x1122334455667788, 0x0102030405060709, 3)
	b3 := make([]byte, 512)
	fillVerifyBlock(b3, 0x1122334455667788, 0x0102030405060708, 4)
	if string(b[36:]) == string(b2[36:]) || string(b[36:]) == string(b3[36:]) {
		t.Error("payload does not depend on the LBA and the generation")
	}
}

func TestCheckVerifyBlock(t *testing.T) {
	const seed, lba, gen = 42, 1000, 2
	for _, bs := range []int{512, 4096} {
		good := make([]byte, bs)
		fillVerifyBlock(good, seed, lba, gen)
		if err := checkVerifyBlock(good, seed, lba, gen); err != nil {
			t.Fatalf("bs %d: a good block fails: %v", bs, err)
		}
		cases := []struct {
			name  string
			block func() []byte
			kind  verifyKind
			msg   string
		}{
			{"zeros", func() []byte { return make([]byte, bs) }, verifyNoHeader, "lba 1000: no verify header"},
			{"payload bit flip", func() []byte {
				b := append([]byte(nil), good...)
				b[bs-1] ^= 0x10
				return b
			}, verifyCorrupt, "lba 1000: corrupt: CRC32C"},
			{"header LBA changed without a new CRC", func() []byte {
				b := append([]byte(nil), good...)
				b[23] ^= 1
				return b
			}, verifyCorrupt, "corrupt"},
			{"another LBA's block", func() []byte {
				b := make([]byte, bs)
				fillVerifyBlock(b, seed, 1001, gen)
				return b
			}, verifyMisplaced, "lba 1000: misplaced: holds the block written to lba 1001"},
			{"the previous pass", func() []byte {
				b := make([]byte, bs)
				fillVerifyBlock(b, seed, lba, gen-1)
				return b
			}, verifyStale, "lba 1000: stale: generation 1, want 2"},
			{"another run", func() []byte {
				b := make([]byte, bs)
				fillVerifyBlock(b, seed+1, lba, gen)
				return b
			}, verifyForeign, "lba 1000: block of another run (seed 43, want 42)"},
		}
		for _, c := range cases {
			err := checkVerifyBlock(c.block(), seed, lba, gen)
			var ve *verifyError
			if !errors.As(err, &ve) || ve.Kind != c.kind || !strings.Contains(err.Error(), c.msg) {
				t.Errorf("bs %d, %s: got %v, want kind %d and %q", bs, c.name, err, c.kind, c.msg)
			}
		}
	}
}
