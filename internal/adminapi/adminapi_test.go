package adminapi

import (
	"encoding/json"
	"testing"
)

// TestSizeJSON: a size is taken as a JSON string (kept as given) or a JSON
// integer (bytes); anything else is an error naming the value.
func TestSizeJSON(t *testing.T) {
	for in, want := range map[string]Size{`"64MiB"`: "64MiB", `1048576`: "1048576", `"1 parsec"`: "1 parsec"} {
		var s Size
		if err := json.Unmarshal([]byte(in), &s); err != nil || s != want {
			t.Errorf("%s: %q %v, want %q", in, s, err, want)
		}
	}
	for _, in := range []string{`1.5`, `true`, `-`, `{}`} {
		var s Size
		if err := json.Unmarshal([]byte(in), &s); err == nil {
			t.Errorf("%s: accepted as %q", in, s)
		}
	}
	b, err := json.Marshal(NewLUN{Size: "1GiB"})
	if err != nil || string(b) != `{"lun":null,"size":"1GiB"}` {
		t.Errorf("marshal: %s %v", b, err)
	}
}
