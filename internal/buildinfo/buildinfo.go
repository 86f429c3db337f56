// Package buildinfo tells which build of gosrp a program is, for the
// programs' --version: the module version (or the one a packager set) and
// the VCS commit the Go toolchain stamped into the binary.
package buildinfo

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// version and commit are set by packagers with -ldflags "-X
// github.com/gosrp/gosrp/internal/buildinfo.version=1.2-3 -X
// ...buildinfo.commit=0123abcd"; empty: the main module's version and the
// VCS revision from the build information.
var version, commit string

// Info is what the binary knows about its build.
type Info struct {
	Version  string // packager's or module version; "(devel)" for a build in a work tree
	Commit   string // VCS revision, "" when not stamped (-buildvcs=false, no VCS)
	Time     string // commit time, RFC 3339, "" when not stamped
	Modified bool   // the work tree had uncommitted changes
	Go       string // Go toolchain version
}

// Read returns the binary's build information.
func Read() Info {
	in := Info{Version: version, Go: runtime.Version()}
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
		}
	}
	if commit != "" && in.Commit == "" {
		in.Commit = commit
	}
	return in
}

// String is one line for --version: "VERSION (commit C, TIME[, modified]) GO".
func (in Info) String() string {
	s := in.Version
	if in.Commit != "" {
		c := in.Commit
		if len(c) > 12 {
			c = c[:12]
		}
		s += " (commit " + c
		if in.Time != "" {
			s += ", " + in.Time
		}
		if in.Modified {
			s += ", modified"
		}
		s += ")"
	}
	return fmt.Sprintf("%s %s", s, in.Go)
}
