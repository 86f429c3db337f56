package buildinfo

import "testing"

func TestString(t *testing.T) {
	for _, c := range []struct {
		in   Info
		want string
	}{
		{Info{Version: "(devel)", Go: "go1.26.0"}, "(devel) go1.26.0"},
		{Info{Version: "v1.2.0", Commit: "0123456789abcdef0123", Time: "2026-12-04T10:00:00Z", Go: "go1.26.0"}, "v1.2.0 (commit 0123456789ab, 2026-12-04T10:00:00Z) go1.26.0"},
		{Info{Version: "0.1-1", Commit: "abc", Modified: true, Go: "go1.26.0"}, "0.1-1 (commit abc, modified) go1.26.0"},
	} {
		if got := c.in.String(); got != c.want {
			t.Errorf("%+v: %q, want %q", c.in, got, c.want)
		}
	}
	if in := Read(); in.Version == "" || in.Go == "" {
		t.Errorf("Read: %+v", in)
	}
}
