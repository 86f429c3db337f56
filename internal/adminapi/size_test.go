package adminapi

import "testing"

// TestParseSize: one syntax for every size: binary units in any case,
// short (k) or long (KiB), decimal fractions exact to the byte (a fraction
// of a byte dropped), spaces around the unit; the SI forms (GB) refused
// naming the binary forms; negative, too large and non-numbers refused
// naming the text.
func TestParseSize(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
	}{
		{"4096", 4096}, {"512B", 512}, {"1 b", 1}, {" 64k ", 64 << 10}, {"64K", 64 << 10}, {"64KiB", 64 << 10}, {"64kib", 64 << 10},
		{"16m", 16 << 20}, {"16MiB", 16 << 20}, {"1g", 1 << 30}, {"1G", 1 << 30}, {"1 GiB", 1 << 30}, {"1gib", 1 << 30},
		{"2t", 2 << 40}, {"1TiB", 1 << 40},
		{"1.5g", 3 << 29}, {"1.5GiB", 3 << 29}, {"1.5MiB", 3 << 19}, {".5k", 512}, {"5.", 5}, {"0.3k", 307}, {"1.5", 1},
		{"0", 0}, {"+5", 5}, {"1e3", 1000}, {"1e3K", 1024000}, {"0x1p10", 1024},
		// Exact beyond a float64's 53 bits.
		{"4611686018427387903", 1<<62 - 1}, {"4611686018427387904", 1 << 62}, {"4194304T", 1 << 62}, {"4095.9999999999999999t", 4095<<40 + 1<<40 - 1},
	} {
		if got, err := ParseSize(tc.in); err != nil || got != tc.want {
			t.Errorf("%q: %d %v, want %d", tc.in, got, err, tc.want)
		}
	}
	for in, want := range map[string]string{
		"30GB":                `bad size "30GB": GB is a power of 1000 to some programs and of 1024 to others; write 30GiB or 30g for the power of 1024, or the bytes`,
		"1.5 mb":              `bad size "1.5 mb": MB is a power of 1000 to some programs and of 1024 to others; write 1.5MiB or 1.5m for the power of 1024, or the bytes`,
		"-4k":                 `bad size "-4k": negative`,
		"99999999999g":        `bad size "99999999999g": more than 4 EiB`,
		"4611686018427387905": `bad size "4611686018427387905": more than 4 EiB`,
		"1e99":                `bad size "1e99": more than 4 EiB`,
		"1 parsec":            `bad size "1 parsec": want ` + SizeSyntax,
		"fooGB":               `bad size "fooGB": want ` + SizeSyntax,
	} {
		if got, err := ParseSize(in); err == nil || err.Error() != want {
			t.Errorf("%q: %d %v, want error %q", in, got, err, want)
		}
	}
	for _, in := range []string{"", "k", "b", "GiB", "NaN", "nanKiB", "inf", "1e999", "1.5.5", "1/2", "4EiB", "1 2k", "0x10"} {
		if got, err := ParseSize(in); err == nil {
			t.Errorf("%q: %d, want an error", in, got)
		}
	}
}
