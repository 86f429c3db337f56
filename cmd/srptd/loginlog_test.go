package main

import (
	"errors"
	"strings"
	"testing"

	"github.com/gosrp/gosrp/rdma/iwarp"
	"github.com/gosrp/gosrp/srp"
	"github.com/gosrp/gosrp/srp/initiator"
)

// TestIULengthRejectLogged: a login refused for its IU length is logged
// with the length asked for and the port's maximum, the number the
// initiator's max_it_iu_size must not exceed.
func TestIULengthRejectLogged(t *testing.T) {
	cfg := writeConfig(t, "[target]\nmax_req_size = 4000\ndemo_mode = true\n[[port]]\nlisten = [\"127.0.0.1:0\"]\n[[lun]]\nlun = 0\nbackstore = \"ram\"\nsize = \"1MiB\"\n")
	dr := launch(t, "--config", cfg)
	opts, err := initiator.ParseTarget(dr.lines[0])
	if err != nil {
		t.Fatal(err)
	}
	opts.ChCount = 1
	dev := iwarp.NewDevice(iwarp.Config{})
	defer dev.Close()
	_, err = initiator.Dial(testCtx(t), dev, opts)
	var rej *initiator.LoginRejectError
	if !errors.As(err, &rej) || rej.Reason != srp.RejReqITIULenTooLarge {
		t.Fatalf("login: %v, want LOGIN_REJ 0x10002", err)
	}
	if log := dr.errOut.String(); !strings.Contains(log, "req_it_iu_len=8260 max_it_iu_len=4000") {
		t.Fatalf("srptd log has no req_it_iu_len/max_it_iu_len:\n%s", log)
	}
}
