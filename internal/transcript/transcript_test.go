package transcript

import (
	"reflect"
	"testing"
)

func TestParse(t *testing.T) {
	text := "# header\n\nA register 0 0xA ->  OK   ua=B:2A03 # comment\n  config rq_size=4\nclosed#end\n"
	want := []Step{
		{File: "f.txt", Line: 3, Cmd: "A register 0 0xA", Fields: []string{"A", "register", "0", "0xA"}, Want: "OK ua=B:2A03", HasWant: true},
		{File: "f.txt", Line: 4, Cmd: "config rq_size=4", Fields: []string{"config", "rq_size=4"}},
		{File: "f.txt", Line: 5, Cmd: "closed", Fields: []string{"closed"}},
	}
	got := Parse("f.txt", text)
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v\nwant %+v", got, want)
	}
	if s := got[0].String(); s != "f.txt:3: A register 0 0xA -> OK ua=B:2A03" {
		t.Errorf("String %q", s)
	}
}
