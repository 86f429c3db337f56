package main

import (
	"bytes"
	"strings"
	"testing"
)

func vpdPage(page byte, body ...byte) []byte {
	return append([]byte{0, page, byte(len(body) >> 8), byte(len(body))}, body...)
}

// TestDecodeVPD: each decoded page names its fields as SPC-4 and SBC-3
// define them (designators by type, association, code set and protocol;
// limits in blocks and IEC bytes); short pages are errors.
func TestDecodeVPD(t *testing.T) {
	b0 := make([]byte, 60)
	b0[0] = 1                                        // WSNZ
	b0[1] = 255                                      // MAXIMUM COMPARE AND WRITE LENGTH
	copy(b0[4:], []byte{0, 0, 0x40, 0})              // MAXIMUM TRANSFER LENGTH 16384
	copy(b0[16:], []byte{0xff, 0xff, 0xff, 0xff})    // MAXIMUM UNMAP LBA COUNT: no limit
	copy(b0[20:], []byte{0, 0, 1, 0})                // MAXIMUM UNMAP BLOCK DESCRIPTOR COUNT 256
	copy(b0[28:], []byte{0x80, 0, 0, 2})             // UGAVALID, alignment 2
	copy(b0[32:], []byte{0, 0, 0, 0, 0, 0x40, 0, 0}) // MAXIMUM WRITE SAME LENGTH 4 Mi blocks
	for _, c := range []struct {
		name string
		page []byte
		bs   uint32
		want []string
	}{
		{"supported pages", vpdPage(0x00, 0x00, 0x80, 0xb0, 0xc5), 0, []string{"0x80  Unit serial number", "0xb0  Block limits", "0xc5  \n"}},
		{"serial", vpdPage(0x80, []byte("ABC123  ")...), 0, []string{"unit serial number: ABC123\n"}},
		{"device identification", vpdPage(0x83,
			// NAA 6, binary, LU
			0x01, 0x03, 0x00, 0x10, 0x60, 0x01, 0x40, 0x56, 0x24, 0x82, 0x66, 0x66, 0x0b, 0xfc, 0xe3, 0xf0, 0, 0, 0, 0,
			// relative target port 2, SRP, PIV, target port
			0x41, 0x94, 0x00, 0x04, 0, 0, 0, 2,
			// SCSI name string, UTF-8, target device
			0x03, 0x28, 0x00, 0x08, 'S', 'R', 'P', '.', 'T', '1', 0, 0,
			// EUI-64, binary, LU
			0x01, 0x02, 0x00, 0x08, 1, 2, 3, 4, 5, 6, 7, 8,
		), 0, []string{
			"designator 1: NAA, binary, associated with the addressed logical unit\n    NAA 6: 0x60014056248266660bfce3f000000000\n",
			"designator 2: relative target port, binary, associated with the target port, protocol SCSI RDMA (SRP)\n    2\n",
			"designator 3: SCSI name string, UTF-8, associated with the target device\n    \"SRP.T1\"\n",
			"designator 4: EUI-64, binary, associated with the addressed logical unit\n    0x0102030405060708\n",
		}},
		{"block limits", vpdPage(0xb0, b0...), 4096, []string{
			"write same non-zero (WSNZ): true", "maximum compare and write length: 255 blocks (1020.0 KiB)",
			"maximum transfer length: 16384 blocks (64.0 MiB)", "maximum prefetch length: 0 (not reported)",
			"maximum unmap LBA count: no limit (FFFFFFFFh)\n",
			"maximum unmap block descriptor count: 256\n", "unmap granularity alignment: 2 blocks (8.0 KiB)",
			"maximum write same length: 4194304 blocks (16.0 GiB)",
		}},
		{"block characteristics", vpdPage(0xb1, 0, 1, 0, 3, 2, 0, 0, 0), 0, []string{"non-rotating medium (solid state)", "nominal form factor: 2.5 inch", "FUA behaviour (FUAB): true"}},
		{"provisioning", vpdPage(0xb2, 0, 0xc4, 2, 0), 0, []string{"UNMAP supported (LBPU): true", "WRITE SAME(10) with UNMAP supported (LBPWS10): false", "(LBPRZ): true", "provisioning type: thin provisioned"}},
		{"unknown page in hex", vpdPage(0xc0, 0xde, 0xad), 0, []string{"unknown page", "de ad"}},
	} {
		var out bytes.Buffer
		if err := decodeVPD(&out, c.page, c.bs); err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(out.String(), w) {
				t.Errorf("%s: no %q in\n%s", c.name, w, out.String())
			}
		}
	}
	for _, bad := range [][]byte{{0, 0x80}, {0, 0x80, 0, 9, 'a'}, vpdPage(0x83, 0x01, 0x03, 0x00, 0x10, 0x60), vpdPage(0xb1, 0, 1), vpdPage(0xb2, 0)} {
		if err := decodeVPD(&bytes.Buffer{}, bad, 0); err == nil {
			t.Errorf("%x: decoded", bad)
		}
	}
}
