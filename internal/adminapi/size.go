package adminapi

import (
	"fmt"
	"math"
	"math/big"
	"strconv"
	"strings"
)

// MaxSize is the largest size ParseSize accepts, in bytes (4 EiB): sums
// and roundings of sizes stay within an int64.
const MaxSize = 1 << 62

// SizeSyntax describes what ParseSize accepts, for flag help and error
// messages.
const SizeSyntax = "bytes, or a number with a binary unit in any case: k or KiB, m or MiB, g or GiB, t or TiB (powers of 1024; fractions too, as in 1.5g)"

// sizeUnits are the binary units ParseSize takes, in bytes; longer
// suffixes first, so that "kib" is not read as "b".
var sizeUnits = []struct {
	suffix string
	bytes  int64
}{
	{"kib", 1 << 10}, {"mib", 1 << 20}, {"gib", 1 << 30}, {"tib", 1 << 40},
	{"k", 1 << 10}, {"m", 1 << 20}, {"g", 1 << 30}, {"t", 1 << 40}, {"b", 1},
}

// ParseSize parses a size as srptd's configuration, its admin API and
// srpctl's size flags write it, into bytes: a non-negative decimal number,
// with a fraction if wanted, then (after optional spaces) an optional
// binary unit in any case: b (bytes), k or KiB (1024 bytes), m or MiB
// (1024² bytes), g or GiB (1024³ bytes), t or TiB (1024⁴ bytes). "4096",
// "64k", "64KiB", "1.5g" and "1 GiB" are all sizes. A fraction of a byte
// is dropped ("0.3k" is 307 bytes). The number may also take the other
// forms of strconv.ParseFloat (a plus sign, an exponent: "1e3"), which
// srptd's configuration has always accepted.
//
// The SI forms kB, MB, GB and TB (any case) are refused, naming the binary
// form to write: some programs take them as powers of 1000, others as
// powers of 1024. Errors name the text given: a negative number, a size
// over MaxSize, or anything else that is not a size.
func ParseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	low := strings.ToLower(t)
	mul := int64(1)
	for _, u := range sizeUnits {
		if strings.HasSuffix(low, u.suffix) {
			t, mul = strings.TrimSpace(t[:len(t)-len(u.suffix)]), u.bytes
			break
		}
	}
	r, ok := sizeNumber(t)
	if !ok {
		// "30GB": only the B was taken as the unit, and an SI prefix
		// stands between it and a number.
		if mul == 1 && strings.HasSuffix(low, "b") && t != "" && strings.ContainsRune("kmgtKMGT", rune(t[len(t)-1])) {
			n, p := strings.TrimSpace(t[:len(t)-1]), t[len(t)-1]
			if _, ok := sizeNumber(n); ok {
				return 0, fmt.Errorf("bad size %q: %cB is a power of 1000 to some programs and of 1024 to others; write %s%ciB or %s%c for the power of 1024, or the bytes",
					s, p&^0x20, n, p&^0x20, n, p|0x20)
			}
		}
		return 0, fmt.Errorf("bad size %q: want %s", s, SizeSyntax)
	}
	if r.Sign() < 0 {
		return 0, fmt.Errorf("bad size %q: negative", s)
	}
	r.Mul(r, new(big.Rat).SetInt64(mul))
	n := new(big.Int).Quo(r.Num(), r.Denom()) // toward zero: a fraction of a byte is dropped
	if n.Cmp(big.NewInt(MaxSize)) > 0 {
		return 0, fmt.Errorf("bad size %q: more than 4 EiB", s)
	}
	return n.Int64(), nil
}

// sizeNumber reads the number of a size: digits with at most one decimal
// point exactly, anything else as strconv.ParseFloat does (a sign, an
// exponent); false for no number, an infinite one or NaN.
func sizeNumber(s string) (*big.Rat, bool) {
	plain, digits, points := true, 0, 0
	for _, c := range s {
		switch {
		case c >= '0' && c <= '9':
			digits++
		case c == '.':
			points++
		default:
			plain = false
		}
	}
	if plain && digits > 0 && points <= 1 {
		return new(big.Rat).SetString(s) // exact, however many digits
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
		return nil, false
	}
	return new(big.Rat).SetFloat64(f), true
}
