package main

import (
	"reflect"
	"strings"
	"testing"
)

// FuzzLoadConfig: any text either fails to load with an error naming the
// source, or loads; a configuration that also validates encodes to TOML
// that loads back to the same values.
func FuzzLoadConfig(f *testing.F) {
	f.Add(defaultConfig)
	f.Add("[target]\nrq_size = 64\nshutdown_timeout = \"3s\"\n[[port]]\nlisten = [\"127.0.0.1:1\"]\n[[lun]]\nlun = 1\nbackstore = \"ram\"\nsize = \"1MiB\"\n[[acl]]\ninitiator = \"0x01\"\nluns = {0 = 1}\nread_only = [0]\n")
	f.Add("[[acl]]\ninitiator = \"1.2.3.4\"\n[acl.luns]\n0 = 1\n[[lun]]\nlun = 1\nbogus = '''\nx\n'''\n")
	f.Add("a = [\n1,\n2]\n[x]\n\"q.k\" = 1\n")
	f.Fuzz(func(t *testing.T, text string) {
		c, err := LoadConfig(text, "f.toml")
		if err != nil {
			if !strings.HasPrefix(err.Error(), "f.toml") {
				t.Fatalf("error without the source: %v", err)
			}
			return
		}
		if err := c.Validate(); err != nil {
			if !strings.HasPrefix(err.Error(), "f.toml") {
				t.Fatalf("error without the source: %v", err)
			}
			return
		}
		b, err := c.Encode()
		if err != nil {
			t.Fatalf("encode: %v", err)
		}
		back, err := LoadConfig(string(b), "g.toml")
		if err != nil {
			t.Fatalf("encoded config does not load: %v\n%s", err, b)
		}
		if err := back.Validate(); err != nil {
			t.Fatalf("encoded config does not validate: %v\n%s", err, b)
		}
		back.src, c.src = nil, nil
		if !reflect.DeepEqual(back, c) {
			t.Fatalf("round trip differs:\n%#v\n%#v\n%s", back, c, b)
		}
	})
}
