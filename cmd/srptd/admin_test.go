package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gosrp/gosrp/internal/adminapi"
	"github.com/gosrp/gosrp/rdma/iwarp"
	"github.com/gosrp/gosrp/srp/initiator"
)

// daemonRun is a running in-process srptd.
type daemonRun struct {
	ready
	lines  []string
	out    *syncBuf
	errOut *syncBuf
	stop   func() error
}

// launch runs srptd with args until stop (or the end of the test).
func launch(t *testing.T, args ...string) *daemonRun {
	t.Helper()
	ctx := testCtx(t)
	runCtx, cancel := context.WithCancel(ctx)
	dr := &daemonRun{out: &syncBuf{}, errOut: &syncBuf{}}
	up := make(chan ready, 1)
	done := make(chan error, 1)
	go func() { done <- run(runCtx, args, dr.out, dr.errOut, func(r ready) { up <- r }) }()
	stopped := false
	var stopErr error
	dr.stop = func() error {
		if stopped {
			return stopErr
		}
		stopped = true
		cancel()
		select {
		case stopErr = <-done:
		case <-time.After(30 * time.Second):
			stopErr = fmt.Errorf("srptd did not shut down")
		}
		return stopErr
	}
	t.Cleanup(func() {
		if err := dr.stop(); err != nil {
			t.Errorf("srptd: %v", err)
		}
		if t.Failed() {
			t.Log(dr.errOut.String())
		}
	})
	select {
	case dr.ready = <-up:
	case err := <-done:
		stopped = true
		t.Fatalf("srptd exited: %v\n%s", err, dr.errOut.String())
	case <-ctx.Done():
		t.Fatal("srptd did not start")
	}
	for _, l := range strings.Split(dr.out.String(), "\n") {
		if s, ok := strings.CutPrefix(l, "login_info: "); ok {
			dr.lines = append(dr.lines, s)
		}
	}
	return dr
}

// login logs in to the first login_info target.
func (dr *daemonRun) login(t *testing.T) *initiator.Session {
	t.Helper()
	opts, err := initiator.ParseTarget(dr.lines[0])
	if err != nil {
		t.Fatal(err)
	}
	opts.ReconnectDelay = -1
	dev := iwarp.NewDevice(iwarp.Config{})
	t.Cleanup(func() { dev.Close() })
	s, err := initiator.Dial(testCtx(t), dev, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// admin calls the admin API; it decodes a JSON answer into out (if not
// nil) and returns the status code and body.
func (dr *daemonRun) admin(t *testing.T, method, path string, body, out any) (int, string) {
	t.Helper()
	c := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", dr.adminSocket)
	}}}
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequestWithContext(testCtx(t), method, "http://srptd"+path, rd)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if out != nil && resp.StatusCode < 300 {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s %s: %v in %q", method, path, err, b)
		}
	}
	return resp.StatusCode, string(b)
}

func inquirySerial(t *testing.T, s *initiator.Session, lun uint64) (serial string, naa []byte) {
	t.Helper()
	ctx := testCtx(t)
	p80, err := s.Inquiry(ctx, lun, true, 0x80, 255)
	if err != nil {
		t.Fatal(err)
	}
	// SPC-4 §7.8.15: header 4 bytes, PAGE LENGTH at byte 3.
	serial = strings.TrimSpace(string(p80[4 : 4+int(p80[3])]))
	p83, err := s.Inquiry(ctx, lun, true, 0x83, 255)
	if err != nil {
		t.Fatal(err)
	}
	// SPC-4 §7.8.6: designation descriptors from byte 4; each is 4 bytes
	// of header (type in byte 1 bits 3..0, length in byte 3) + designator.
	for i := 4; i+4 <= len(p83); {
		l := int(p83[i+3])
		if p83[i+1]&0x0f == 3 && l == 16 { // NAA, IEEE Registered Extended
			naa = append([]byte(nil), p83[i+4:i+4+l]...)
		}
		i += 4 + l
	}
	if naa == nil {
		t.Fatalf("no 16-byte NAA designator in VPD 83h % x", p83)
	}
	return serial, naa
}

// TestDefaultDataDir runs the embedded default (on a free loopback port):
// one 1 GiB sparse file LUN in a fresh 0700 data directory, demo mode; a
// restart on the same data directory shows the same data, service GUID,
// serial and NAA.
func TestDefaultDataDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	guidRE := regexp.MustCompile(`^id_ext=([0-9a-f]{16}),ioc_guid=([0-9a-f]{16}),dest=127\.0\.0\.1:\d+$`)
	pattern := make([]byte, 64<<10)
	for i := range pattern {
		pattern[i] = byte(i*7 + 3)
	}
	var guid, serial string
	var naa []byte
	for round := 0; round < 2; round++ {
		dr := launch(t, "--data-dir", dir, "--listen", "127.0.0.1:0")
		if len(dr.lines) != 1 || !guidRE.MatchString(dr.lines[0]) {
			t.Fatalf("login_info %q", dr.lines)
		}
		g := guidRE.FindStringSubmatch(dr.lines[0])[1]
		if !strings.Contains(dr.errOut.String(), "demo mode on") {
			t.Errorf("no demo mode log line:\n%s", dr.errOut.String())
		}
		fi, err := os.Stat(dir)
		if err != nil || fi.Mode().Perm() != 0o700 {
			t.Fatalf("data dir %v %v", fi.Mode(), err)
		}
		img, err := os.Stat(filepath.Join(dir, "lun0.img"))
		if err != nil || img.Size() != 1<<30 {
			t.Fatalf("lun0.img: %v %v", img, err)
		}
		if blocks := img.Sys().(*syscall.Stat_t).Blocks; blocks*512 > 16<<20 {
			t.Errorf("lun0.img not sparse: %d bytes allocated", blocks*512)
		}
		s := dr.login(t)
		ctx := testCtx(t)
		c, err := s.ReadCapacity16(ctx, initiator.LUN(0))
		if err != nil || c.BlockSize != 512 || c.LastLBA != (1<<30)/512-1 {
			t.Fatalf("READ CAPACITY %+v %v", c, err)
		}
		ser, n := inquirySerial(t, s, initiator.LUN(0))
		got := make([]byte, len(pattern))
		if err := s.Read16(ctx, initiator.LUN(0), 100, got, 512, false); err != nil {
			t.Fatal(err)
		}
		if round == 0 {
			guid, serial, naa = g, ser, n
			if !bytes.Equal(got, make([]byte, len(got))) {
				t.Fatal("fresh LUN not zero")
			}
			if err := s.Write16(ctx, initiator.LUN(0), 100, pattern, 512, false); err != nil {
				t.Fatal(err)
			}
		} else {
			if g != guid || ser != serial || !bytes.Equal(n, naa) {
				t.Errorf("identity changed: guid %s→%s serial %q→%q naa %x→%x", guid, g, serial, ser, naa, n)
			}
			if !bytes.Equal(got, pattern) {
				t.Error("data not kept across the restart")
			}
		}
		s.Close()
		if err := dr.stop(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestDemoOnlyOnLoopback: the embedded default on a non-loopback listener
// is not in demo mode (logins refused); -demo true turns it on with a
// warning.
func TestDemoOnlyOnLoopback(t *testing.T) {
	dir := t.TempDir()
	dr := launch(t, "-data-dir", dir, "-listen", "0.0.0.0:0")
	if !strings.Contains(dr.errOut.String(), "every login is refused") {
		t.Errorf("no warning:\n%s", dr.errOut.String())
	}
	var line string
	for _, l := range dr.lines {
		if strings.Contains(l, "dest=127.0.0.1:") {
			line = l
		}
	}
	opts, err := initiator.ParseTarget(line)
	if err != nil {
		t.Fatalf("%q: %v", dr.lines, err)
	}
	opts.ReconnectDelay = -1
	dev := iwarp.NewDevice(iwarp.Config{})
	defer dev.Close()
	if s, err := initiator.Dial(testCtx(t), dev, opts); err == nil {
		s.Close()
		t.Fatal("login admitted on a non-loopback default without -demo")
	}
	dr.stop()

	dr = launch(t, "-data-dir", dir, "-listen", "127.0.0.1:0", "-demo", "true")
	if !strings.Contains(dr.errOut.String(), "level=WARN msg=\"demo mode: every initiator is admitted") {
		t.Errorf("no warning:\n%s", dr.errOut.String())
	}
	dr.login(t)
	// An ACL added in demo mode restricts nothing yet: the answer says so.
	var added adminapi.ACLAdded
	if code, body := dr.admin(t, "POST", "/acls", map[string]any{"initiator": "192.0.2.7"}, &added); code != 201 || !added.DemoMode {
		t.Errorf("add ACL in demo mode: %d %s, want demo_mode true", code, body)
	}
}

// TestAdminAPI drives the admin API: LUNs added and removed at run time
// (with REPORTED LUNS DATA HAS CHANGED), ACLs, sessions, counters, save.
func TestAdminAPI(t *testing.T) {
	dir := t.TempDir()
	cfgPath := writeConfig(t, `
[target]
demo_mode = false
[[port]]
name = "p0"
listen = ["127.0.0.1:0"]
[[lun]]
lun = 0
name = "zero"
backstore = "ram"
size = "8MiB"
[[acl]]
initiator = "127.0.0.1"
`)
	dr := launch(t, "-config", cfgPath, "-data-dir", dir)
	if dr.adminSocket != filepath.Join(dir, "srptd.sock") {
		t.Fatalf("admin socket %q", dr.adminSocket)
	}
	if fi, err := os.Stat(dr.adminSocket); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("socket mode %v %v", fi, err)
	}
	var li []string
	if code, _ := dr.admin(t, "GET", "/login-info", nil, &li); code != 200 || !reflect.DeepEqual(li, dr.lines) {
		t.Fatalf("login-info %d %q, printed %q", code, li, dr.lines)
	}
	s := dr.login(t)
	ctx := testCtx(t)
	if err := s.TestUnitReady(ctx, initiator.LUN(0)); err != nil { // clears power-on UA
		t.Fatal(err)
	}

	// A LUN added at run time: the nexus gets REPORTED LUNS DATA HAS
	// CHANGED (SPC-4: 06h/3Fh/0Eh) on LUN 0, then sees LUN 5.
	img := filepath.Join(dir, "five.img")
	lun5 := map[string]any{"lun": 5, "name": "five", "backstore": "file", "path": img, "size": "4MiB", "block_size": 4096}
	if code, body := dr.admin(t, "POST", "/luns", lun5, nil); code != 201 {
		t.Fatalf("add LUN: %d %s", code, body)
	}
	if code, body := dr.admin(t, "POST", "/luns", lun5, nil); code != 409 {
		t.Fatalf("add LUN twice: %d %s", code, body)
	}
	if code, body := dr.admin(t, "POST", "/luns", map[string]any{"lun": 6, "backstore": "ram", "size": "1MiB", "block_size": 3000}, nil); code != 400 || !strings.Contains(body, "lun.block_size: 3000 is not 512, 1024, 2048 or 4096") {
		t.Fatalf("bad LUN: %d %s", code, body)
	}
	res, err := s.Execute(ctx, &initiator.Command{LUN: initiator.LUN(0), CDB: make([]byte, 6)})
	if err != nil || !initiator.IsSense(res.Err(), 6, 0x3f, 0x0e) {
		t.Fatalf("TEST UNIT READY after add: %v %v", res.Err(), err)
	}
	luns, err := s.ReportLUNs(ctx)
	if err != nil || !reflect.DeepEqual(luns, []uint64{initiator.LUN(0), initiator.LUN(5)}) {
		t.Fatalf("REPORT LUNS %x %v", luns, err)
	}

	// Counters: one 64 KiB WRITE and one 64 KiB READ on LUN 5.
	// The first command to LUN 5 reports its power-on attention; clear it.
	if err := s.TestUnitReady(ctx, initiator.LUN(5)); err != nil {
		t.Fatal(err)
	}
	var before, after []adminapi.LUN
	dr.admin(t, "GET", "/luns", nil, &before)
	buf := bytes.Repeat([]byte{0xa5}, 64<<10)
	if err := s.Write16(ctx, initiator.LUN(5), 2, buf, 4096, false); err != nil {
		t.Fatal(err)
	}
	if err := s.Read16(ctx, initiator.LUN(5), 2, buf, 4096, false); err != nil {
		t.Fatal(err)
	}
	dr.admin(t, "GET", "/luns", nil, &after)
	if len(after) != 2 || after[1].LUN != 5 || after[1].Size != 4<<20 || after[1].BlockSize != 4096 || after[1].Path != img {
		t.Fatalf("luns %+v", after)
	}
	b, a := before[1].Counters, after[1].Counters
	if a.Commands-b.Commands != 2 || a.ReadBytes-b.ReadBytes != 64<<10 || a.WriteBytes-b.WriteBytes != 64<<10 || a.Errors != b.Errors || a.AvgLatencyUs <= 0 {
		t.Fatalf("counters before %+v after %+v", b, a)
	}

	var bss []adminapi.Backstore
	dr.admin(t, "GET", "/backstores", nil, &bss)
	if len(bss) != 2 || bss[0].Type != "ram" || bss[0].Allocated == nil || *bss[0].Allocated != 0 ||
		bss[1].Type != "file" || bss[1].Path != img || bss[1].Size != 4<<20 || bss[1].Allocated == nil || *bss[1].Allocated < 64<<10 || *bss[1].Allocated >= 4<<20 {
		t.Fatalf("backstores %+v", bss)
	}

	var sess []adminapi.Session
	dr.admin(t, "GET", "/sessions", nil, &sess)
	var cmds, rd, wr uint64
	for _, c := range sess {
		if c.Port != "p0" || c.State != "LIVE" || c.InitiatorPort != sess[0].InitiatorPort {
			t.Fatalf("sessions %+v", sess)
		}
		cmds, rd, wr = cmds+c.Commands, rd+c.ReadBytes, wr+c.WriteBytes
	}
	if len(sess) == 0 || cmds < 5 || rd < 64<<10 || wr < 64<<10 {
		t.Fatalf("sessions %+v", sess)
	}

	// ACLs. Demo mode is off: the answer says so.
	var added adminapi.ACLAdded
	if code, body := dr.admin(t, "POST", "/acls", map[string]any{"initiator": "0002:c903:0000:1234", "luns": map[string]int{"0": 5}}, &added); code != 201 || added.DemoMode || !strings.Contains(body, `"demo_mode":false`) {
		t.Fatalf("add ACL: %d %s", code, body)
	}
	if code, body := dr.admin(t, "POST", "/acls", map[string]any{"initiator": "0x01", "luns": map[string]int{"0": 9}}, nil); code != 400 || !strings.Contains(body, "acl.luns.0: target LUN 9 is not configured") {
		t.Fatalf("bad ACL: %d %s", code, body)
	}
	if code, body := dr.admin(t, "DELETE", "/luns/5", nil, nil); code != 409 || !strings.Contains(body, "0002:c903:0000:1234") {
		t.Fatalf("remove a mapped LUN: %d %s", code, body)
	}
	if code, body := dr.admin(t, "POST", "/acls", map[string]any{"initiator": "192.0.2.99", "read_only": []int{5}}, nil); code != 201 {
		t.Fatalf("add ACL: %d %s", code, body)
	}
	if code, body := dr.admin(t, "DELETE", "/acls/0002:c903:0000:1234", nil, nil); code != 204 {
		t.Fatalf("remove ACL: %d %s", code, body)
	}
	if code, body := dr.admin(t, "DELETE", "/luns/5", nil, nil); code != 409 || !strings.Contains(body, "192.0.2.99 lists LUN 5 as read_only") {
		t.Fatalf("remove a read-only LUN: %d %s", code, body)
	}
	if code, body := dr.admin(t, "DELETE", "/acls/192.0.2.99", nil, nil); code != 204 {
		t.Fatalf("remove ACL: %d %s", code, body)
	}
	if code, body := dr.admin(t, "POST", "/acls", map[string]any{"initiator": "0002:c903:0000:1234", "luns": map[string]int{"0": 5}}, nil); code != 201 {
		t.Fatalf("add ACL: %d %s", code, body)
	}
	var acls []adminapi.ACL
	dr.admin(t, "GET", "/acls", nil, &acls)
	if len(acls) != 2 || acls[1].Initiator != "0002:c903:0000:1234" || acls[1].LUNs["0"] != 5 {
		t.Fatalf("acls %+v", acls)
	}

	// Save, and the saved file loads back to the running state. The
	// configuration was written by hand: it is kept, the save goes beside it.
	var saved map[string]string
	if code, body := dr.admin(t, "POST", "/save", nil, &saved); code != 200 || saved["path"] != cfgPath+".saved" || saved["kept"] != cfgPath {
		t.Fatalf("save %d %s", code, body)
	}
	back, err := readConfigFile(cfgPath + ".saved")
	if err != nil {
		t.Fatal(err)
	}
	if err := back.Validate(); err != nil {
		t.Fatal(err)
	}
	running := dr.d.cfg
	for _, f := range []struct {
		name      string
		got, want any
	}{{"target", back.Target, running.Target}, {"ports", back.Ports, running.Ports}, {"luns", back.LUNs, running.LUNs}, {"acls", back.ACLs, running.ACLs}, {"admin", back.Admin, running.Admin}} {
		if !reflect.DeepEqual(f.got, f.want) {
			t.Errorf("saved %s %+v, running %+v", f.name, f.got, f.want)
		}
	}
	if len(back.LUNs) != 2 || *back.LUNs[1].LUN != 5 || back.LUNs[1].BlockSize != 4096 || len(back.ACLs) != 2 {
		t.Fatalf("saved %+v", back)
	}

	if code, _ := dr.admin(t, "DELETE", "/acls/"+url.PathEscape("0002:c903:0000:1234"), nil, nil); code != 204 {
		t.Fatalf("remove ACL %d", code)
	}
	if code, _ := dr.admin(t, "DELETE", "/acls/"+url.PathEscape("0002:c903:0000:1234"), nil, nil); code != 404 {
		t.Fatalf("remove ACL twice %d", code)
	}
	if code, body := dr.admin(t, "DELETE", "/luns/5", nil, nil); code != 204 {
		t.Fatalf("remove LUN %d %s", code, body)
	}
	if code, _ := dr.admin(t, "DELETE", "/luns/5", nil, nil); code != 404 {
		t.Fatalf("remove LUN twice %d", code)
	}
	res, err = s.Execute(ctx, &initiator.Command{LUN: initiator.LUN(0), CDB: make([]byte, 6)})
	if err != nil || !initiator.IsSense(res.Err(), 6, 0x3f, 0x0e) {
		t.Fatalf("TEST UNIT READY after remove: %v %v", res.Err(), err)
	}
	// A removed LUN: LOGICAL UNIT NOT SUPPORTED (05h/25h/00h).
	if err := s.Read16(ctx, initiator.LUN(5), 0, buf[:4096], 4096, false); !initiator.IsSense(err, 5, 0x25, 0) {
		t.Fatalf("READ of a removed LUN: %v", err)
	}

	// Session removal: SRP_T_LOGOUT.
	dr.admin(t, "GET", "/sessions", nil, &sess)
	if code, _ := dr.admin(t, "DELETE", "/sessions/"+sess[0].InitiatorPort, nil, nil); code != 204 {
		t.Fatalf("remove session %d", code)
	}
	for len(dr.d.Sessions()) > 0 {
		select {
		case <-ctx.Done():
			t.Fatal("sessions not removed")
		case <-time.After(10 * time.Millisecond):
		}
	}
	if code, _ := dr.admin(t, "DELETE", "/sessions/999999", nil, nil); code != 404 {
		t.Fatalf("remove unknown session %d", code)
	}
}

// TestMetrics scrapes /metrics after I/O.
func TestMetrics(t *testing.T) {
	dr := launch(t, "-data-dir", t.TempDir(), "-listen", "127.0.0.1:0", "-metrics", "127.0.0.1:0")
	s := dr.login(t)
	ctx := testCtx(t)
	buf := make([]byte, 8192)
	for i := 0; i < 3; i++ {
		if err := s.Read16(ctx, initiator.LUN(0), 0, buf, 512, false); err != nil {
			t.Fatal(err)
		}
	}
	// The target counts a command in progress until its response's SEND
	// completes, which it may see after the initiator has the response:
	// wait for that before expecting a queue depth of 0.
	for {
		idle := true
		for _, ss := range dr.d.Sessions() {
			idle = idle && ss.Outstanding == 0
		}
		if idle {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("commands still in progress: %+v", dr.d.Sessions())
		case <-time.After(10 * time.Millisecond):
		}
	}
	resp, err := http.Get("http://" + dr.metricsAddr.String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	text := string(body)
	value := func(series string) float64 {
		for _, l := range strings.Split(text, "\n") {
			if v, ok := strings.CutPrefix(l, series+" "); ok {
				f, _ := strconv.ParseFloat(v, 64)
				return f
			}
		}
		t.Fatalf("no %s in\n%s", series, text)
		return 0
	}
	lbl := `{lun="0",name="disk0"}`
	if v := value("srptd_lun_read_bytes_total" + lbl); v < 3*8192 {
		t.Errorf("read bytes %v", v)
	}
	cmds := value("srptd_lun_commands_total" + lbl)
	if cmds < 3 {
		t.Errorf("commands %v", cmds)
	}
	if v := value(`srptd_lun_command_duration_seconds_bucket{lun="0",name="disk0",le="+Inf"}`); v != cmds {
		t.Errorf("histogram count %v, commands %v", v, cmds)
	}
	value("srptd_lun_command_duration_seconds_sum" + lbl)
	if !regexp.MustCompile(`(?m)^srptd_channel_req_lim\{channel="\d+",initiator="[0-9a-f]{32}",port="iwarp0"\} \d+$`).MatchString(text) {
		t.Errorf("no req_lim gauge in\n%s", text)
	}
	if !regexp.MustCompile(`(?m)^srptd_channel_queue_depth\{channel="\d+",initiator="[0-9a-f]{32}",port="iwarp0"\} 0$`).MatchString(text) {
		t.Errorf("no queue depth gauge in\n%s", text)
	}
}

// TestDataDirLocked: a second srptd on the same data directory stops
// before opening anything.
func TestDataDirLocked(t *testing.T) {
	dir := t.TempDir()
	launch(t, "-data-dir", dir, "-listen", "127.0.0.1:0")
	err := run(testCtx(t), []string{"-data-dir", dir, "-listen", "127.0.0.1:0"}, io.Discard, io.Discard, nil)
	if err == nil || err.Error() != "data directory "+dir+" is in use by another srptd" {
		t.Fatalf("second srptd: %v", err)
	}
}

// TestMetricsAddressInUse: a metrics listener that cannot bind stops
// srptd before any SRP port listens (no login_info).
func TestMetricsAddressInUse(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	cfg := writeConfig(t, "[[port]]\nlisten = [\"127.0.0.1:0\"]\n[metrics]\nlisten = \""+l.Addr().String()+"\"\n")
	var out bytes.Buffer
	err = run(testCtx(t), []string{"-config", cfg}, &out, io.Discard, nil)
	if err == nil || !strings.Contains(err.Error(), "srptd.toml:4: metrics.listen: ") || !strings.Contains(err.Error(), "address already in use") {
		t.Fatalf("err %v", err)
	}
	if out.Len() != 0 {
		t.Fatalf("printed %q", out.String())
	}
}

// TestSaveRestart: on the default configuration, a LUN added through the
// admin API and saved is there after a restart on the same data
// directory, with the same serial, and the saved file is read.
func TestSaveRestart(t *testing.T) {
	dir := t.TempDir()
	dr := launch(t, "-data-dir", dir, "-listen", "127.0.0.1:0")
	if code, body := dr.admin(t, "POST", "/luns", map[string]any{"lun": 1, "size": "2MiB"}, nil); code != 201 {
		t.Fatalf("add LUN: %d %s", code, body)
	}
	var saved map[string]string
	if code, body := dr.admin(t, "POST", "/save", nil, &saved); code != 200 || saved["path"] != filepath.Join(dir, "srptd.toml") {
		t.Fatalf("save %d %s", code, body)
	}
	var before []adminapi.LUN
	dr.admin(t, "GET", "/luns", nil, &before)
	if err := dr.stop(); err != nil {
		t.Fatal(err)
	}
	dr = launch(t, "-data-dir", dir)
	var after []adminapi.LUN
	dr.admin(t, "GET", "/luns", nil, &after)
	if len(after) != 2 || after[1].LUN != 1 || after[1].Path != filepath.Join(dir, "lun1.img") || after[1].Size != 2<<20 ||
		after[0].Serial != before[0].Serial || after[1].Serial != before[1].Serial {
		t.Fatalf("before %+v\nafter %+v", before, after)
	}
	if !strings.Contains(dr.lines[0], "dest=127.0.0.1:") || !strings.Contains(dr.errOut.String(), "demo mode on") {
		t.Fatalf("login_info %q\n%s", dr.lines, dr.errOut.String())
	}
}

// TestSaveKeepsHandWritten: POST /save leaves a hand-written configuration
// file (its comments and mode) as it is and writes FILE.saved beside it,
// naming both; a file srptd wrote itself is replaced, keeping its mode.
func TestSaveKeepsHandWritten(t *testing.T) {
	dir := t.TempDir()
	hand := "# my target, do not lose this comment\n[[port]]\nlisten = [\"127.0.0.1:0\"]  # loopback\n[[lun]]\nlun = 0\nbackstore = \"ram\"\nsize = \"1MiB\"\n"
	cfg := filepath.Join(dir, "srptd.toml")
	if err := os.WriteFile(cfg, []byte(hand), 0o640); err != nil {
		t.Fatal(err)
	}
	dr := launch(t, "--config", cfg, "--data-dir", filepath.Join(dir, "data"))
	if code, body := dr.admin(t, "POST", "/luns", map[string]any{"lun": 1, "backstore": "ram", "size": "2MiB"}, nil); code != 201 {
		t.Fatalf("add LUN: %d %s", code, body)
	}
	var saved adminapi.Saved
	if code, body := dr.admin(t, "POST", "/save", nil, &saved); code != 200 || saved.Path != cfg+".saved" || saved.Kept != cfg {
		t.Fatalf("save: %d %s", code, body)
	}
	if b, err := os.ReadFile(cfg); err != nil || string(b) != hand {
		t.Fatalf("hand-written file changed: %q %v", b, err)
	}
	if fi, err := os.Stat(cfg); err != nil || fi.Mode().Perm() != 0o640 {
		t.Fatalf("hand-written file mode: %v %v", fi.Mode(), err)
	}
	c, err := readConfigFile(saved.Path)
	if err != nil || len(c.LUNs) != 2 {
		t.Fatalf("%s: %+v %v", saved.Path, c, err)
	}
	if err := dr.stop(); err != nil {
		t.Fatal(err)
	}

	// The default configuration saved into the data directory is srptd's
	// own: saving again replaces it and keeps the mode the admin gave it.
	data := filepath.Join(dir, "d2")
	dr = launch(t, "--data-dir", data, "--listen", "127.0.0.1:0")
	saved = adminapi.Saved{}
	if code, body := dr.admin(t, "POST", "/save", nil, &saved); code != 200 || saved.Kept != "" {
		t.Fatalf("save: %d %s", code, body)
	}
	if err := os.Chmod(saved.Path, 0o644); err != nil {
		t.Fatal(err)
	}
	saved = adminapi.Saved{}
	if code, body := dr.admin(t, "POST", "/save", nil, &saved); code != 200 || saved.Kept != "" || saved.Path != filepath.Join(data, "srptd.toml") {
		t.Fatalf("save again: %d %s", code, body)
	}
	if fi, err := os.Stat(saved.Path); err != nil || fi.Mode().Perm() != 0o644 {
		t.Fatalf("saved file mode after a second save: %v %v", fi.Mode(), err)
	}
}

// TestDecodeBodyOneValue: an admin request body is one JSON value; a
// second one after it (two LUNs pasted into one POST /luns) is refused
// instead of silently dropped.
func TestDecodeBodyOneValue(t *testing.T) {
	for _, tc := range []struct{ body, want string }{
		{`{"lun": 3}`, ""},
		{"{\"lun\": 3}\n", ""},
		{`{"lun": 3}{"lun": 4}`, "request body: more than one JSON value"},
		{`{"lun": 3} x`, "request body: more than one JSON value"},
		{`{"lun": 3`, "request body: unexpected EOF"},
	} {
		var v adminapi.NewLUN
		err := decodeBody(httptest.NewRequest("POST", "/luns", strings.NewReader(tc.body)), &v)
		got := ""
		if err != nil {
			got = err.Error()
		}
		if got != tc.want || (err == nil && v.LUN == nil) {
			t.Errorf("%q: %q, want %q", tc.body, got, tc.want)
		}
	}
}
