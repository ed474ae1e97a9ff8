package link

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Rate is a bandwidth in bits per second.
type Rate int64

// Common rates, so callers can write 100*link.Mbit.
const (
	Bit  Rate = 1
	Kbit      = 1000 * Bit
	Mbit      = 1000 * Kbit
	Gbit      = 1000 * Mbit
	Tbit      = 1000 * Gbit
)

// rateUnits lists the decimal multipliers String chooses from, largest first.
var rateUnits = [...]struct {
	prefix string
	mult   Rate
	digits int // log10(mult)
}{
	{"T", Tbit, 12},
	{"G", Gbit, 9},
	{"M", Mbit, 6},
	{"k", Kbit, 3},
	{"", Bit, 0},
}

// ParseRate parses a bandwidth such as "100Mbit", "1.5Gbit", "500kbit",
// "64000" (a bare number is bits/s) or "10Mbps". The number is decimal with an
// optional fraction; the unit is an optional k, M, G or T prefix (either
// case) followed by "bit" or "bps". Multipliers are powers of 1000.
//
// Unlike tc(8), "bps" means bits per second here, and byte units ("MBps",
// "MB/s") are rejected rather than guessed at. Fractions below one bit/s are
// truncated. The result must be positive: 0 is not a way to spell
// "unlimited" (use a zero Impairments.Rate for that).
func ParseRate(s string) (Rate, error) {
	str := strings.TrimSpace(s)
	neg := strings.HasPrefix(str, "-")
	if neg {
		str = str[1:]
	}
	i := 0
	for i < len(str) && (str[i] >= '0' && str[i] <= '9' || str[i] == '.') {
		i++
	}
	num, unit := str[:i], strings.TrimSpace(str[i:])
	whole, frac, _ := strings.Cut(num, ".")
	if whole == "" && frac == "" || strings.Contains(frac, ".") {
		return 0, fmt.Errorf("link: invalid rate %q: want a number and a unit like \"100Mbit\"", s)
	}
	mult, digits, err := parseRateUnit(unit)
	if err != nil {
		return 0, fmt.Errorf("link: invalid rate %q: %w", s, err)
	}

	var r Rate
	if whole != "" {
		w, err := strconv.ParseInt(whole, 10, 64)
		if err != nil || w > math.MaxInt64/int64(mult) {
			return 0, fmt.Errorf("link: invalid rate %q: too large", s)
		}
		r = Rate(w) * mult
	}
	// Digits beyond the multiplier's precision are worth less than one
	// bit/s; dropping them keeps the arithmetic exact and overflow-free.
	if len(frac) > digits {
		frac = frac[:digits]
	}
	if frac != "" {
		f, _ := strconv.ParseInt(frac, 10, 64) // at most 12 digits, all checked
		for range digits - len(frac) {
			f *= 10
		}
		if r > math.MaxInt64-Rate(f) {
			return 0, fmt.Errorf("link: invalid rate %q: too large", s)
		}
		r += Rate(f)
	}
	if neg || r <= 0 {
		return 0, fmt.Errorf("link: rate must be positive, got %q", s)
	}
	return r, nil
}

// parseRateUnit returns the multiplier of unit and its number of decimal
// digits.
func parseRateUnit(unit string) (Rate, int, error) {
	if unit == "" {
		return Bit, 0, nil
	}
	base, mult, digits := unit, Bit, 0
	switch unit[0] {
	case 'k', 'K':
		base, mult, digits = unit[1:], Kbit, 3
	case 'm', 'M':
		base, mult, digits = unit[1:], Mbit, 6
	case 'g', 'G':
		base, mult, digits = unit[1:], Gbit, 9
	case 't', 'T':
		base, mult, digits = unit[1:], Tbit, 12
	}
	switch {
	case strings.EqualFold(base, "bit") || base == "bps":
		return mult, digits, nil
	case base == "B" || base == "Bps" || base == "B/s" || strings.EqualFold(base, "byte"):
		return 0, 0, fmt.Errorf("unit %q is bytes, rates are in bits (\"bit\", \"bps\")", unit)
	default:
		return 0, 0, fmt.Errorf("unknown unit %q", unit)
	}
}

// String formats r with the largest unit it reaches, keeping every
// significant digit ("100Mbit", "1.5Gbit", "64kbit", "1bit"), so ParseRate
// reads it back exactly. The zero Rate is "unlimited".
func (r Rate) String() string {
	if r == 0 {
		return "unlimited"
	}
	sign, v := "", r
	if v < 0 {
		if v == math.MinInt64 {
			return strconv.FormatInt(int64(v), 10) + "bit"
		}
		sign, v = "-", -v
	}
	for _, u := range rateUnits {
		if v < u.mult {
			continue
		}
		s := sign + strconv.FormatInt(int64(v/u.mult), 10)
		if rem := v % u.mult; rem != 0 {
			f := strconv.FormatInt(int64(rem), 10)
			f = strings.Repeat("0", u.digits-len(f)) + f
			s += "." + strings.TrimRight(f, "0")
		}
		return s + u.prefix + "bit"
	}
	panic("unreachable") // v >= 1 always matches the last unit
}
