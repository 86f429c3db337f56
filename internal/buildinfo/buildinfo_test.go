package buildinfo

import (
	"runtime"
	"testing"
)

func TestString(t *testing.T) {
	for _, c := range []struct {
		in   Info
		want string
	}{
		// A build with a version says that, its commit and Go, whatever
		// else it knows.
		{Info{Version: "v1.2.0", Commit: "0123456789abcdef0123", Time: "2026-12-04T10:00:00Z", Go: "go1.26.0", Tags: "verbs", Platform: "linux/amd64"}, "v1.2.0 (commit 0123456789ab, 2026-12-04T10:00:00Z) go1.26.0"},
		{Info{Version: "0.1-1", Commit: "abc", Modified: true, Go: "go1.26.0", Platform: "linux/amd64"}, "0.1-1 (commit abc, modified) go1.26.0"},
		{Info{Version: "v0.0.0-20261204100000-0123456789ab", Go: "go1.26.0", Platform: "linux/amd64"}, "v0.0.0-20261204100000-0123456789ab go1.26.0"},
		// A devel build adds its tags and platform, and says when no
		// commit was stamped.
		{Info{Version: "devel", Go: "go1.26.0", Platform: "linux/amd64"}, "devel (no commit stamped, linux/amd64) go1.26.0"},
		{Info{Version: "devel", Go: "go1.26.0", Tags: "verbs", Platform: "linux/arm64"}, "devel (no commit stamped, tags verbs, linux/arm64) go1.26.0"},
		{Info{Version: "devel", Commit: "0123456789abcdef0123", Modified: true, Go: "go1.26.0", Platform: "linux/amd64"}, "devel (commit 0123456789ab, modified, linux/amd64) go1.26.0"},
	} {
		if got := c.in.String(); got != c.want {
			t.Errorf("%+v: %q, want %q", c.in, got, c.want)
		}
	}
	// The test binary has no module version: Go calls it "(devel)".
	if in := Read(); in.Version == "" || in.Version == "(devel)" || in.Go != runtime.Version() || in.Platform != runtime.GOOS+"/"+runtime.GOARCH {
		t.Errorf("Read: %+v", in)
	}
}
