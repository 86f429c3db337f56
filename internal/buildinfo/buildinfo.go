// Package buildinfo tells which build of gosrp a program is, for the
// programs' --version: the module version (or the one a packager set) and
// the VCS commit the Go toolchain stamped into the binary.
package buildinfo

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
)

// version and commit are set by packagers with -ldflags "-X
// github.com/gosrp/gosrp/internal/buildinfo.version=1.2-3 -X
// ...buildinfo.commit=0123abcd"; empty: the main module's version and the
// VCS revision from the build information.
var version, commit string

// Info is what the binary knows about its build.
type Info struct {
	// Version is the packager's or the module's version; "devel" for a
	// build without either (in a work tree whose VCS information was not
	// stamped, -buildvcs=false, or outside git: Go's "(devel)").
	Version  string
	Commit   string // VCS revision, "" when not stamped (-buildvcs=false, no VCS)
	Time     string // commit time, RFC 3339, "" when not stamped
	Modified bool   // the work tree had uncommitted changes
	Go       string // Go toolchain version
	Tags     string // build tags (-tags), "" for none
	Platform string // GOOS/GOARCH
}

// devel is the Version of a build that has no version.
const devel = "devel"

// Read returns the binary's build information.
func Read() Info {
	in := read()
	if in.Version == "(devel)" {
		in.Version = devel
	}
	return in
}

func read() Info {
	in := Info{Version: version, Go: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		if in.Version == "" {
			in.Version = "unknown"
		}
		in.Commit = commit
		return in
	}
	if in.Version == "" {
		in.Version = bi.Main.Version
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			in.Commit = s.Value
		case "vcs.time":
			in.Time = s.Value
		case "vcs.modified":
			in.Modified = s.Value == "true"
		case "-tags":
			in.Tags = s.Value
		}
	}
	if commit != "" && in.Commit == "" {
		in.Commit = commit
	}
	return in
}

// String is one line for --version: "VERSION (commit C, TIME[, modified]) GO".
// A devel build, which has no version to tell it by, adds what else it
// knows: "devel (commit C, ..., tags T, GOOS/GOARCH) GO", or "no commit
// stamped" in place of the commit.
func (in Info) String() string {
	var facts []string
	if in.Commit != "" {
		c := in.Commit
		if len(c) > 12 {
			c = c[:12]
		}
		facts = append(facts, "commit "+c)
		if in.Time != "" {
			facts = append(facts, in.Time)
		}
		if in.Modified {
			facts = append(facts, "modified")
		}
	}
	if in.Version == devel {
		if in.Commit == "" {
			facts = append(facts, "no commit stamped")
		}
		if in.Tags != "" {
			facts = append(facts, "tags "+in.Tags)
		}
		if in.Platform != "" {
			facts = append(facts, in.Platform)
		}
	}
	s := in.Version
	if len(facts) > 0 {
		s += " (" + strings.Join(facts, ", ") + ")"
	}
	return fmt.Sprintf("%s %s", s, in.Go)
}
