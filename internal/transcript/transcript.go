// Package transcript reads the line-oriented transcripts that the SCSI
// core, the persistent reservation state machine and the SRP target replay
// in their tests: one step a line, "#" starts a comment that runs to the
// end of the line, blank lines are skipped, and "->" separates a step from
// what it must produce. What a step means is each test's own business.
package transcript

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Step is one line of a transcript.
type Step struct {
	File string // the transcript's path
	Line int    // 1-based line number
	// Cmd is the text before "->" (all of it without one), trimmed, and
	// Fields its words.
	Cmd    string
	Fields []string
	// Want is the text after "->" with its words joined by single spaces;
	// HasWant reports whether the line had "->".
	Want    string
	HasWant bool
}

// String is "file:line: step" for failure messages.
func (s Step) String() string {
	if s.HasWant {
		return fmt.Sprintf("%s:%d: %s -> %s", s.File, s.Line, s.Cmd, s.Want)
	}
	return fmt.Sprintf("%s:%d: %s", s.File, s.Line, s.Cmd)
}

// Parse splits the transcript text read from file into its steps.
func Parse(file, text string) []Step {
	var steps []Step
	for i, line := range strings.Split(text, "\n") {
		if k := strings.IndexByte(line, '#'); k >= 0 {
			line = line[:k]
		}
		if strings.TrimSpace(line) == "" {
			continue
		}
		cmd, want, has := strings.Cut(line, "->")
		cmd = strings.TrimSpace(cmd)
		steps = append(steps, Step{File: file, Line: i + 1, Cmd: cmd, Fields: strings.Fields(cmd),
			Want: strings.Join(strings.Fields(want), " "), HasWant: has})
	}
	return steps
}

// Run runs fn as a subtest, named after the file, for each transcript
// matching pattern (a filepath.Glob pattern), with its steps. It fails when
// no file matches.
func Run(t *testing.T, pattern string, fn func(t *testing.T, steps []Step)) {
	t.Helper()
	files, err := filepath.Glob(pattern)
	if err != nil || len(files) == 0 {
		t.Fatalf("no transcripts match %s (%v)", pattern, err)
	}
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			b, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			fn(t, Parse(file, string(b)))
		})
	}
}
