package srp

import (
	"errors"
	"net/netip"
	"reflect"
	"strings"
	"testing"
)

func TestTargetOptionsLab(t *testing.T) {
	o, err := ParseTargetOptions("id_ext=000000fffe000001,ioc_guid=000000fffe000001,initiator_ext=fe80000000000000,dest=192.0.2.1:5555\n")
	if err != nil {
		t.Fatal(err)
	}
	if o.IDExt != 0xfffe000001 || o.IOCGUID != 0xfffe000001 || o.InitiatorExt != 0xfe80000000000000 ||
		o.Dest != netip.MustParseAddrPort("192.0.2.1:5555") {
		t.Fatalf("%+v", o)
	}
	if o.TargetPortID().String() != "000000fffe000001000000fffe000001" {
		t.Fatal(o.TargetPortID())
	}
	if p := o.InitiatorPortID(0); p.String() != "fe800000000000000000000000000000" {
		t.Fatal(p)
	}
	// The lab's siw login: initiator_ext is the first half of GID
	// 0200:0000:0002:0000:0:0:0:0 and the interface ID (second half) is
	// zero, giving the initiator port ID of the capture.
	siw, err := ParseTargetOptions("id_ext=000000fffe000001,ioc_guid=000000fffe000001,initiator_ext=0200000000020000,dest=[2001:db8::2]:5555")
	if err != nil {
		t.Fatal(err)
	}
	if p := siw.InitiatorPortID(0); p.String() != "02000000000200000000000000000000" {
		t.Fatal(p)
	}
	r10 := TargetOptions{IDExt: 1, IOCGUID: 2, InitiatorExt: 3, IOClass: IOClassSRPRev10}
	if r10.TargetPortID().String() != "00000000000000020000000000000001" ||
		r10.InitiatorPortID(4).String() != "00000000000000040000000000000003" {
		t.Fatal(r10.TargetPortID(), r10.InitiatorPortID(4))
	}
	if s := o.String(); s != "id_ext=000000fffe000001,ioc_guid=000000fffe000001,dest=192.0.2.1:5555,initiator_ext=fe80000000000000" {
		t.Fatal(s)
	}
	o, err = ParseTargetOptions("id_ext=000000fffe000001,ioc_guid=000000fffe000001,dest=[2001:db8::2]:5555,transport=iwarp")
	if err != nil || o.Dest.String() != "[2001:db8::2]:5555" || o.Transport != "iwarp" {
		t.Fatalf("%v %+v", err, o)
	}
}

func TestTargetOptionsSRPDaemon(t *testing.T) {
	s := "id_ext=0002c90300001234,ioc_guid=0002c90300001234,dgid=fe800000000000000002c90300001235,pkey=ffff,service_id=0002c90300001234,io_class=ff00,max_it_iu_size=8276"
	o, err := ParseTargetOptions(s)
	if err != nil {
		t.Fatal(err)
	}
	want := [16]byte{0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0x02, 0xc9, 0x03, 0, 0, 0x12, 0x35}
	if o.DGID != want || o.PKey != 0xffff || o.ServiceID != 0x0002c90300001234 || o.IOClass != 0xff00 || o.MaxITIUSize != 8276 {
		t.Fatalf("%+v", o)
	}
	if o.String() != s {
		t.Fatalf("render:\n%s\n%s", o.String(), s)
	}
}

func TestTargetOptionsValues(t *testing.T) {
	base := "id_ext=1,ioc_guid=0x2,dest=10.0.0.1:0x15b3,"
	good := map[string]func(*TargetOptions) bool{
		"cmd_sg_entries=1":   func(o *TargetOptions) bool { return o.CmdSGEntries == 1 },
		"cmd_sg_entries=255": func(o *TargetOptions) bool { return o.CmdSGEntries == 255 },
		"tl_retry_count=2":   func(o *TargetOptions) bool { return o.TLRetryCount == 2 },
		"tl_retry_count=7":   func(o *TargetOptions) bool { return o.TLRetryCount == 7 },
		"io_class=100":       func(o *TargetOptions) bool { return o.IOClass == 0x0100 },
		"io_class=0xff00":    func(o *TargetOptions) bool { return o.IOClass == 0xff00 },
		"sg_tablesize=2048":  func(o *TargetOptions) bool { return o.SGTablesize == 2048 },
		"queue_size=0x40":    func(o *TargetOptions) bool { return o.QueueSize == 64 },
		"max_sect=010":       func(o *TargetOptions) bool { return o.MaxSect == 8 },
		"max_cmd_per_lun=62": func(o *TargetOptions) bool { return o.MaxCmdPerLUN == 62 },
		"target_can_queue=1": func(o *TargetOptions) bool { return o.TargetCanQueue == 1 },
		"allow_ext_sg=5":     func(o *TargetOptions) bool { return o.AllowExtSG },
		"allow_ext_sg=0":     func(o *TargetOptions) bool { return !o.AllowExtSG && o.Has("allow_ext_sg") },
		"comp_vector=0":      func(o *TargetOptions) bool { return o.CompVector == 0 && o.Has("comp_vector") },
		"max_it_iu_size=0":   func(o *TargetOptions) bool { return o.MaxITIUSize == 0 },
		"ch_count=4":         func(o *TargetOptions) bool { return o.ChCount == 4 },
		"src=10.0.0.2":       func(o *TargetOptions) bool { return o.Src == netip.MustParseAddrPort("10.0.0.2:0") },
		"src=[fe80::1%eth0]": func(o *TargetOptions) bool { return o.Src.Addr().Zone() == "eth0" },
		"transport=verbs":    func(o *TargetOptions) bool { return o.Transport == "verbs" },
		"initiator_ext=0XfF": func(o *TargetOptions) bool { return o.InitiatorExt == 0xff },
		",,queue_size=1,,\n": func(o *TargetOptions) bool { return o.QueueSize == 1 },
	}
	for extra, check := range good {
		o, err := ParseTargetOptions(base + extra)
		if err != nil {
			t.Errorf("%s: %v", extra, err)
			continue
		}
		if o.Dest.Port() != 5555 || o.IOCGUID != 2 {
			t.Errorf("%s: base fields %+v", extra, o)
		}
		if !check(o) {
			t.Errorf("%s: %+v", extra, o)
		}
		back, err := ParseTargetOptions(o.String())
		if err != nil || !reflect.DeepEqual(back, o) {
			t.Errorf("%s: render %q: %v", extra, o.String(), err)
		}
	}
	bad := map[string]string{
		"cmd_sg_entries=0":                      "cmd_sg_entries",
		"cmd_sg_entries=256":                    "cmd_sg_entries",
		"cmd_sg_entries=-1":                     "cmd_sg_entries",
		"tl_retry_count=1":                      "tl_retry_count",
		"tl_retry_count=8":                      "tl_retry_count",
		"io_class=200":                          "io_class",
		"io_class=zz":                           "io_class",
		"sg_tablesize=0":                        "sg_tablesize",
		"sg_tablesize=2049":                     "sg_tablesize",
		"queue_size=0":                          "queue_size",
		"queue_size=-3":                         "queue_size",
		"max_cmd_per_lun=0":                     "max_cmd_per_lun",
		"target_can_queue=0":                    "target_can_queue",
		"ch_count=0":                            "ch_count",
		"comp_vector=-1":                        "comp_vector",
		"max_it_iu_size=-1":                     "max_it_iu_size",
		"max_sect=0":                            "max_sect",
		"max_sect=12ab":                         "max_sect",
		"queue_size=99999999999":                "queue_size",
		"pkey=10000":                            "pkey",
		"pkey=":                                 "pkey",
		"pkey":                                  "pkey",
		"dgid=fe80000000000000000000000000001":  "dgid",
		"dgid=fe80000000000000000000000000001g": "dgid",
		"dgid=0xfe8000000000000000000000000001": "dgid",
		"initiator_ext=10000000000000000":       "initiator_ext",
		"initiator_ext=-1":                      "initiator_ext",
		"src=10.0.0.300":                        "src",
		"src=fe80::1":                           "src",
		"transport=tcp":                         "transport",
		"foo=1":                                 "foo",
		"dest=10.0.0.9:1":                       "dest",
		"=3":                                    "",
	}
	for extra, key := range bad {
		_, err := ParseTargetOptions(base + extra)
		var de *DecodeError
		if !errors.As(err, &de) || de.Field != key || de.IU != "add_target" {
			t.Errorf("%s: got %v, want error on %q", extra, err, key)
		}
	}
	// A number outside its key's range is refused with that range: past
	// the C int range, and negative for an unsigned key too. ch_count's
	// range is the 1..255 channels gosrp's initiator logs in.
	for extra, want := range map[string]string{
		"max_sect=4294967295":               "max_sect: 4294967295 is outside 1..2147483647",
		"max_sect=-5":                       "max_sect: -5 is outside 1..2147483647",
		"ch_count=0":                        "ch_count: 0 is outside 1..255",
		"ch_count=300":                      "ch_count: 300 is outside 1..255",
		"ch_count=-1":                       "ch_count: -1 is outside 1..255",
		"ch_count=0x100":                    "ch_count: 0x100 is outside 1..255",
		"ch_count=99999999999999999999999":  "ch_count: 99999999999999999999999 is outside 1..255",
		"ch_count=-0":                       `ch_count: "-0": a minus sign before 0`,
		"ch_count=x":                        `ch_count: "x" is not a number`,
		"cmd_sg_entries=-1":                 "cmd_sg_entries: -1 is outside 1..255",
		"sg_tablesize=-1":                   "sg_tablesize: -1 is outside 1..2048",
		"comp_vector=-1":                    "comp_vector: -1 is outside 0..2147483647",
		"tl_retry_count=-1":                 "tl_retry_count: -1 is outside 2..7",
		"allow_ext_sg=-1":                   "allow_ext_sg: -1 is outside 0..2147483647",
		"pkey=-1":                           "pkey: -1 is outside 0..ffff",
		"pkey=10000":                        "pkey: 10000 is outside 0..ffff",
		"pkey=fffffffff":                    "pkey: fffffffff is outside 0..ffff",
		"io_class=-1":                       "io_class: -1 is neither ff00 (SRP r10) nor 100 (SRP r16a)",
		"initiator_ext=-1":                  "initiator_ext: -1 is outside 0..ffffffffffffffff",
		"initiator_ext=0x10000000000000000": "initiator_ext: 0x10000000000000000 is outside 0..ffffffffffffffff",
		"initiator_ext=-x":                  `initiator_ext: "-x" is not a hex number`,
	} {
		if _, err := ParseTargetOptions(base + extra); err == nil || !strings.HasSuffix(err.Error(), "add_target: "+want) {
			t.Errorf("%s: %v, want %q", extra, err, want)
		}
	}
	if o, err := ParseTargetOptions(base + "ch_count=255"); err != nil || o.ChCount != 255 {
		t.Errorf("ch_count=255: %v", err)
	}
	missing := map[string]string{
		"ioc_guid=2,dest=1.2.3.4:5": "id_ext",
		"id_ext=1,dest=1.2.3.4:5":   "ioc_guid",
		"id_ext=1,ioc_guid=2":       "dgid",
		"id_ext=1,ioc_guid=2,dgid=fe800000000000000002c90300001235,pkey=ffff": "service_id",
		"id_ext=1,ioc_guid=2,dest=1.2.3.4":                                    "dest",
		"id_ext=1,ioc_guid=2,dest=[::1]":                                      "dest",
		"id_ext=1,ioc_guid=2,dest=::1:5":                                      "dest",
		"id_ext=1,ioc_guid=2,dest=1.2.3.4:":                                   "dest",
		"id_ext=1,ioc_guid=2,dest=1.2.3.4:65536":                              "dest",
		"id_ext=1,id_ext=1,ioc_guid=2,dest=1.2.3.4:5":                         "id_ext",
		"id_ext=1,ioc_guid=2,dest=1.2.3.4:5,dest=1.2.3.4:6":                   "dest",
	}
	for s, key := range missing {
		_, err := ParseTargetOptions(s)
		var de *DecodeError
		if !errors.As(err, &de) || de.Field != key {
			t.Errorf("%s: got %v, want error on %q", s, err, key)
		}
	}
}

func TestTargetOptionsSet(t *testing.T) {
	o := &TargetOptions{IDExt: 1, IOCGUID: 2, Dest: netip.MustParseAddrPort("[::1]:5")}
	if err := o.Set("queue_size", "32"); err != nil {
		t.Fatal(err)
	}
	if err := o.Set("queue_size", "16"); err != nil || o.QueueSize != 16 {
		t.Fatal(err, o.QueueSize)
	}
	if err := o.Set("nope", "1"); err == nil {
		t.Fatal("unknown key accepted")
	}
	if s := o.String(); s != "id_ext=0000000000000001,ioc_guid=0000000000000002,dest=[::1]:5,queue_size=16" {
		t.Fatal(s)
	}
}
