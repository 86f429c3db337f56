// Command mantoml writes the srptd.toml(5) manual page, generated from the
// configuration reference in docs/srptd.md (its "Configuration file" and
// "Example" sections) with go-md2man.
//
//	go run ./packaging/mantoml -doc docs/srptd.md -version V > srptd.toml.5
package main

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/cpuguy83/go-md2man/v2/md2man"
)

func main() {
	docPath := flag.String("doc", "docs/srptd.md", "srptd reference `file` (Markdown)")
	version := flag.String("version", "", "gosrp `version` for the page footer")
	flag.Parse()
	b, err := os.ReadFile(*docPath)
	if err != nil {
		fmt.Fprintln(os.Stderr, "mantoml:", err)
		os.Exit(1)
	}
	md, err := page(b, *version)
	if err != nil {
		fmt.Fprintln(os.Stderr, "mantoml:", *docPath+":", err)
		os.Exit(1)
	}
	os.Stdout.Write(md2man.Render(md))
}

// sections are the level-2 headings of docs/srptd.md the page is made of,
// in order, with the man page section each becomes.
var sections = []struct{ doc, man string }{
	{"Configuration file", "DESCRIPTION"},
	{"Example", "EXAMPLE"},
}

// page returns the Markdown of srptd.toml(5): a title block, NAME, the
// sections of doc (their subsections one level up), SEE ALSO.
func page(doc []byte, version string) ([]byte, error) {
	var out bytes.Buffer
	fmt.Fprintf(&out, "%% SRPTD.TOML 5 \"\" \"gosrp %s\" \"gosrp\"\n\n# NAME\n\nsrptd.toml - configuration file of srptd, the gosrp SRP target daemon\n\n", version)
	for _, s := range sections {
		body, ok := section(doc, s.doc)
		if !ok {
			return nil, fmt.Errorf("no section %q", "## "+s.doc)
		}
		fmt.Fprintf(&out, "# %s\n\n%s\n", s.man, body)
	}
	out.WriteString("# SEE ALSO\n\nsrptd(8), srpctl(8), srpctl-target(8)\n")
	return out.Bytes(), nil
}

// section returns the body of the level-2 section titled title, up to
// the next level-2 heading, with its level-3 headings made level 2.
func section(doc []byte, title string) (string, bool) {
	var b strings.Builder
	in, found := false, false
	sc := bufio.NewScanner(bytes.NewReader(doc))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		l := sc.Text()
		if strings.HasPrefix(l, "## ") {
			in = strings.TrimSpace(l[3:]) == title
			found = found || in
			continue
		}
		if !in {
			continue
		}
		if strings.HasPrefix(l, "### ") {
			l = l[1:]
		}
		b.WriteString(l)
		b.WriteByte('\n')
	}
	return b.String(), found
}
