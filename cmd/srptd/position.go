package main

import (
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/BurntSushi/toml"
)

// source locates the keys of a TOML text by line, so configuration errors
// can say "srptd.toml:12: lun[1].block_size: ...". Keys are named with the
// index of their array-of-tables element: "lun[1].block_size",
// "target.rq_size", "acl[0].luns".
type source struct {
	name  string
	text  string
	lines map[string]int // key → 1-based line
	order []string       // keys in document order
}

var (
	headerRE = regexp.MustCompile(`^\s*(\[\[?)\s*([^\]]+?)\s*\]\]?\s*(#.*)?$`)
	keyRE    = regexp.MustCompile(`^\s*((?:[A-Za-z0-9_-]+|"[^"]*"|'[^']*')(?:\s*\.\s*(?:[A-Za-z0-9_-]+|"[^"]*"|'[^']*'))*)\s*=`)
)

// scanSource records the line of every table header and key. It follows
// the TOML grammar only as far as locating keys needs: headers, dotted and
// quoted keys, and multi-line strings and arrays (whose lines hold no keys).
func scanSource(text, name string) *source {
	s := &source{name: name, text: text, lines: map[string]int{}}
	count := map[string]int{}
	prefix := ""
	depth := 0    // open [ of a multi-line array
	inMulti := "" // open """ or ''' of a multi-line string
	for i, line := range strings.Split(text, "\n") {
		n := i + 1
		if inMulti != "" {
			if strings.Count(line, inMulti)%2 == 1 {
				inMulti = ""
			}
			continue
		}
		if depth > 0 {
			depth += bracketDepth(line)
			continue
		}
		if m := headerRE.FindStringSubmatch(line); m != nil {
			name := normKey(m[2])
			if m[1] == "[[" {
				prefix = fmt.Sprintf("%s[%d]", name, count[name])
				count[name]++
			} else {
				prefix = name
				// A sub-table of the latest array element: [acl.luns].
				if head, rest, ok := strings.Cut(name, "."); ok && count[head] > 0 {
					prefix = fmt.Sprintf("%s[%d].%s", head, count[head]-1, rest)
				}
			}
			s.add(prefix, n)
			continue
		}
		m := keyRE.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		key := normKey(m[1])
		if prefix != "" {
			key = prefix + "." + key
		}
		s.add(key, n)
		rest := line[len(m[0]):]
		for _, q := range []string{`"""`, `'''`} {
			if strings.Count(rest, q)%2 == 1 {
				inMulti = q
			}
		}
		depth = bracketDepth(rest)
		if depth < 0 {
			depth = 0
		}
	}
	return s
}

func (s *source) add(key string, line int) {
	if _, ok := s.lines[key]; !ok {
		s.lines[key] = line
		s.order = append(s.order, key)
	}
}

// normKey removes quotes and spaces from a dotted key.
func normKey(k string) string {
	parts := strings.Split(k, ".")
	for i, p := range parts {
		parts[i] = strings.Trim(strings.TrimSpace(p), `"'`)
	}
	return strings.Join(parts, ".")
}

// bracketDepth is the count of [ minus ] outside strings and comments.
func bracketDepth(s string) int {
	d := 0
	var quote byte
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case quote != 0:
			if c == '\\' && quote == '"' {
				i++
			} else if c == quote {
				quote = 0
			}
		case c == '"' || c == '\'':
			quote = c
		case c == '#':
			return d
		case c == '[':
			d++
		case c == ']':
			d--
		}
	}
	return d
}

// line returns the line of field, or of the nearest enclosing key or table
// that appears in the text ("lun[1].size" missing: the [[lun]] header).
func (s *source) line(field string) int {
	for f := field; f != ""; {
		if n, ok := s.lines[f]; ok {
			return n
		}
		i := strings.LastIndexAny(f, ".[")
		if i < 0 {
			break
		}
		f = f[:i]
	}
	return 0
}

// errorAt formats "name:line: field: msg" (without the line when field is
// not in the text).
func (s *source) errorAt(field, msg string) error {
	if n := s.line(field); n > 0 {
		return fmt.Errorf("%s:%d: %s: %s", s.name, n, field, msg)
	}
	return fmt.Errorf("%s: %s: %s", s.name, field, msg)
}

// firstIndexed returns the first key in the text whose name without
// indexes is generic ("lun.bogus" → "lun[2].bogus").
func (s *source) firstIndexed(generic string) string {
	for _, k := range s.order {
		if stripIndexes(k) == generic {
			return k
		}
	}
	return generic
}

var indexRE = regexp.MustCompile(`\[\d+\]`)

func stripIndexes(k string) string { return indexRE.ReplaceAllString(k, "") }

// decodeError converts an error of the TOML decoder. elem is the indexed
// name of the table being decoded ("lun[1]"), or "" for the document.
func (s *source) decodeError(err error, elem string) error {
	var pe toml.ParseError
	if errors.As(err, &pe) {
		if elem == "" || pe.LastKey == "" {
			// A syntax error (the document pass decodes no values): the
			// parser's position is exact.
			return fmt.Errorf("%s:%d: %s", s.name, s.lineOf(pe.Position), pe.Message)
		}
		return s.errorAt(s.indexedKey(pe.LastKey, elem), pe.Message)
	}
	msg := err.Error()
	if m := lineKeyRE.FindStringSubmatch(msg); m != nil {
		return s.errorAt(s.indexedKey(m[1], elem), strings.TrimPrefix(msg[len(m[0]):], "toml: "))
	}
	return fmt.Errorf("%s: %s", s.name, strings.TrimPrefix(msg, "toml: "))
}

// indexedKey turns the decoder's key ("lun.size") into the indexed name
// ("lun[1].size") given the element being decoded ("lun[1]").
func (s *source) indexedKey(generic, elem string) string {
	if elem == "" {
		return s.firstIndexed(generic)
	}
	base := stripIndexes(elem)
	if rest, ok := strings.CutPrefix(generic, base+"."); ok {
		return elem + "." + rest
	}
	if generic == base {
		return elem
	}
	return s.firstIndexed(generic)
}

// lineOf is the line of a parser position, counted from its byte offset:
// the parser reports an error at a line's newline on the next line.
func (s *source) lineOf(p toml.Position) int {
	if p.Start > 0 && p.Start <= len(s.text) {
		return strings.Count(s.text[:p.Start], "\n") + 1
	}
	return p.Line
}
