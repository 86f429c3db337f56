package main

import (
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"strings"
)

// vpdNames are the VPD pages srpctl decodes, and others by name
// (SPC-4 §7.8, SBC-3 §6.6).
var vpdNames = map[byte]string{
	0x00: "Supported VPD pages",
	0x80: "Unit serial number",
	0x83: "Device identification",
	0x86: "Extended INQUIRY data",
	0x87: "Mode page policy",
	0x88: "SCSI ports",
	0xB0: "Block limits",
	0xB1: "Block device characteristics",
	0xB2: "Logical block provisioning",
}

// decodeVPD writes page b (with its 4-byte header) as sg_vpd would: the
// pages srpctl knows field by field, others as hex. bs is the logical block
// size for limits given in blocks (0: unknown, blocks only). Errors: a
// page shorter than its header or than the fields it claims.
func decodeVPD(w io.Writer, b []byte, bs uint32) error {
	if len(b) < 4 {
		return fmt.Errorf("VPD page of %d bytes: shorter than its 4-byte header", len(b))
	}
	page, n := b[1], int(binary.BigEndian.Uint16(b[2:]))
	if 4+n > len(b) {
		return fmt.Errorf("VPD page %#02x: PAGE LENGTH %d, but %d bytes came", page, n, len(b)-4)
	}
	body := b[4 : 4+n]
	name := vpdNames[page]
	if name == "" {
		name = "unknown page"
	}
	fmt.Fprintf(w, "VPD page %#02x: %s (peripheral type %d)\n", page, name, b[0]&0x1f)
	switch page {
	case 0x00:
		for _, p := range body {
			fmt.Fprintf(w, "  %#02x  %s\n", p, vpdNames[p])
		}
	case 0x80:
		fmt.Fprintf(w, "  unit serial number: %s\n", strings.TrimRight(string(body), " \x00"))
	case 0x83:
		return decodeDeviceID(w, body)
	case 0xB0:
		return decodeBlockLimits(w, body, bs)
	case 0xB1:
		return decodeBlockCharacteristics(w, body)
	case 0xB2:
		return decodeProvisioning(w, body)
	default:
		fmt.Fprint(w, indent(hex.Dump(body)))
	}
	return nil
}

func indent(s string) string {
	return "  " + strings.ReplaceAll(strings.TrimSuffix(s, "\n"), "\n", "\n  ") + "\n"
}

// Designation descriptor fields (SPC-4 §7.8.6.1, tables 460-463).
var (
	designatorTypes = [16]string{"vendor specific", "T10 vendor ID", "EUI-64", "NAA", "relative target port",
		"target port group", "logical unit group", "MD5 logical unit identifier", "SCSI name string",
		"protocol specific port identifier", "UUID"}
	associations = [4]string{"addressed logical unit", "target port", "target device", "reserved"}
	codeSets     = [16]string{1: "binary", 2: "ASCII", 3: "UTF-8"}
	protocolIDs  = [16]string{"Fibre Channel", "parallel SCSI", "SSA", "IEEE 1394", "SCSI RDMA (SRP)", "iSCSI", "SAS", "ADT", "ATA", "UAS", "SOP"}
)

// decodeDeviceID writes the designation descriptors of VPD page 83h.
func decodeDeviceID(w io.Writer, b []byte) error {
	for i := 1; len(b) > 0; i++ {
		if len(b) < 4 || 4+int(b[3]) > len(b) {
			return fmt.Errorf("VPD 83h: designation descriptor %d runs past the page", i)
		}
		d := b[4 : 4+int(b[3])]
		typ, assoc, cs := b[1]&0x0f, (b[1]>>4)&3, b[0]&0x0f
		tn := designatorTypes[typ]
		if tn == "" {
			tn = fmt.Sprintf("reserved (%#x)", typ)
		}
		fmt.Fprintf(w, "  designator %d: %s, %s, associated with the %s", i, tn, orNum(codeSets[cs], cs), associations[assoc])
		if b[1]&0x80 != 0 { // PIV: the protocol identifier is valid
			fmt.Fprintf(w, ", protocol %s", orNum(protocolIDs[b[0]>>4], b[0]>>4))
		}
		fmt.Fprintln(w)
		fmt.Fprintf(w, "    %s\n", designatorValue(typ, cs, d))
		b = b[4+len(d):]
	}
	return nil
}

func orNum(name string, v byte) string {
	if name == "" {
		return fmt.Sprintf("%#x", v)
	}
	return name
}

// designatorValue renders one designator by its type.
func designatorValue(typ, codeSet byte, d []byte) string {
	text := strings.TrimRight(string(d), "\x00 ")
	switch {
	case typ == 3 && len(d) > 0: // NAA (SPC-4 §7.8.6.6): the NAA field is the top nibble
		return fmt.Sprintf("NAA %d: 0x%x", d[0]>>4, d)
	case (typ == 4 || typ == 5 || typ == 6) && len(d) == 4: // number in bytes 2-3
		return fmt.Sprintf("%d", binary.BigEndian.Uint16(d[2:]))
	case typ == 1 && len(d) >= 8: // T10 vendor ID: 8-byte vendor, then vendor specific
		return fmt.Sprintf("vendor %q, %q", strings.TrimSpace(string(d[:8])), strings.TrimSpace(string(d[8:])))
	case codeSet == 2 || codeSet == 3:
		return fmt.Sprintf("%q", text)
	}
	return "0x" + hex.EncodeToString(d)
}

// beField reads a big-endian field of n bytes at off of body, or reports
// false when the page is too short for it.
func beField(body []byte, off, n int) (uint64, bool) {
	if off+n > len(body) {
		return 0, false
	}
	var v uint64
	for _, c := range body[off : off+n] {
		v = v<<8 | uint64(c)
	}
	return v, true
}

// decodeBlockLimits writes VPD page B0h (SBC-3 §6.6.4 table 200; the
// atomic fields of SBC-4 when the page has them). Offsets are page
// offsets less the header.
func decodeBlockLimits(w io.Writer, b []byte, bs uint32) error {
	if len(b) < 8 {
		return fmt.Errorf("VPD B0h: %d bytes, too short for the block limits", len(b))
	}
	blocks := func(v uint64) string {
		if v == 0 {
			return "0 (not reported)"
		}
		if bs == 0 {
			return fmt.Sprintf("%d blocks", v)
		}
		return fmt.Sprintf("%d blocks (%s)", v, humanBytes(v*uint64(bs)))
	}
	if len(b) > 0 {
		fmt.Fprintf(w, "  write same non-zero (WSNZ): %v\n", b[0]&1 != 0)
	}
	for _, f := range []struct {
		name   string
		off, n int
	}{
		{"maximum compare and write length", 1, 1},
		{"optimal transfer length granularity", 2, 2},
		{"maximum transfer length", 4, 4},
		{"optimal transfer length", 8, 4},
		{"maximum prefetch length", 12, 4},
		{"maximum unmap LBA count", 16, 4},
		{"maximum unmap block descriptor count", 20, 4},
		{"optimal unmap granularity", 24, 4},
		{"maximum write same length", 32, 8},
		{"maximum atomic transfer length", 40, 4},
		{"atomic alignment", 44, 4},
		{"atomic transfer length granularity", 48, 4},
	} {
		v, ok := beField(b, f.off, f.n)
		if !ok {
			break
		}
		switch {
		case (f.name == "maximum unmap LBA count" || f.name == "maximum unmap block descriptor count") && v == 0xffffffff:
			// SBC-3 §6.6.4: FFFF_FFFFh means no limit.
			fmt.Fprintf(w, "  %s: no limit (FFFFFFFFh)\n", f.name)
		case f.name == "maximum unmap block descriptor count":
			fmt.Fprintf(w, "  %s: %d\n", f.name, v)
		default:
			fmt.Fprintf(w, "  %s: %s\n", f.name, blocks(v))
		}
		if f.name == "optimal unmap granularity" {
			if a, ok := beField(b, 28, 4); ok {
				if a&(1<<31) != 0 { // UGAVALID
					fmt.Fprintf(w, "  unmap granularity alignment: %s\n", blocks(a&^(1<<31)))
				} else {
					fmt.Fprintf(w, "  unmap granularity alignment: not reported\n")
				}
			}
		}
	}
	return nil
}

// decodeBlockCharacteristics writes VPD page B1h (SBC-3 §6.6.2).
func decodeBlockCharacteristics(w io.Writer, b []byte) error {
	if len(b) < 5 {
		return fmt.Errorf("VPD B1h: %d bytes, too short", len(b))
	}
	switch r := binary.BigEndian.Uint16(b); {
	case r == 0:
		fmt.Fprintln(w, "  medium rotation rate: not reported")
	case r == 1:
		fmt.Fprintln(w, "  medium rotation rate: non-rotating medium (solid state)")
	default:
		fmt.Fprintf(w, "  medium rotation rate: %d rpm\n", r)
	}
	fmt.Fprintf(w, "  product type: %s\n", map[byte]string{0: "not indicated", 1: "CFast", 2: "CompactFlash", 3: "MemoryStick", 4: "MultiMediaCard", 5: "Secure Digital Card", 6: "XQD", 7: "Universal Flash Storage"}[b[2]])
	forms := [16]string{"not reported", "5.25 inch", "3.5 inch", "2.5 inch", "1.8 inch", "less than 1.8 inch"}
	fmt.Fprintf(w, "  nominal form factor: %s\n", orNum(forms[b[3]&0x0f], b[3]&0x0f))
	fmt.Fprintf(w, "  FUA behaviour (FUAB): %v\n  verify byte check unmapped LBA supported (VBULS): %v\n", b[4]&2 != 0, b[4]&1 != 0)
	return nil
}

// decodeProvisioning writes VPD page B2h (SBC-3 §6.6.5).
func decodeProvisioning(w io.Writer, b []byte) error {
	if len(b) < 3 {
		return fmt.Errorf("VPD B2h: %d bytes, too short", len(b))
	}
	fmt.Fprintf(w, "  threshold exponent: %d\n", b[0])
	for _, f := range []struct {
		name string
		bit  byte
	}{
		{"UNMAP supported (LBPU)", 0x80},
		{"WRITE SAME(16) with UNMAP supported (LBPWS)", 0x40},
		{"WRITE SAME(10) with UNMAP supported (LBPWS10)", 0x20},
		{"unmapped blocks read as zeros (LBPRZ)", 0x04},
		{"anchored LBAs supported (ANC_SUP)", 0x02},
		{"provisioning group descriptor present (DP)", 0x01},
	} {
		fmt.Fprintf(w, "  %s: %v\n", f.name, b[1]&f.bit != 0)
	}
	types := [8]string{"not reported (fully provisioned)", "resource provisioned", "thin provisioned"}
	fmt.Fprintf(w, "  provisioning type: %s\n", orNum(types[b[2]&7], b[2]&7))
	return nil
}
