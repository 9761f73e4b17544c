package dispatch

import (
	"encoding/json"
	"math/big"
	"strings"
)

// orderingKeyText is the text an ordering key's value is grouped by. A
// string is taken as written. A number is taken by value: equal numbers
// give the same text however they are written (1, 1.0, 1e0, 10e-1), and
// different numbers different texts, however close (nothing is rounded to
// a float64). Objects and arrays are their JSON with every number so
// rendered (and keys sorted, as encoding/json writes maps).
func orderingKeyText(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case json.Number:
		return canonicalNumber(string(x))
	default:
		b, _ := json.Marshal(canonicalNumbers(x))
		return string(b)
	}
}

// canonicalNumbers returns v with every json.Number in it in canonical form.
func canonicalNumbers(v any) any {
	switch x := v.(type) {
	case json.Number:
		return json.Number(canonicalNumber(string(x)))
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = canonicalNumbers(e)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = canonicalNumbers(e)
		}
		return out
	default:
		return v
	}
}

// Bounds of canonicalNumber's plain notation, in powers of ten: an integer
// of up to maxPlainDigits digits is written out in full (as it always was:
// an integer key keeps its group), a fraction when its first significant
// digit is no further than 10^-6 (as JavaScript and strconv's 'g' switch
// to exponents); anything else is d.ddde±n.
const (
	maxPlainDigits = int64(maxGroupValue)
	maxPlainFrac   = 21
	minPlainExp    = -6
)

// canonicalNumber renders a JSON number (RFC 8259 grammar; anything else
// is returned as it is) in one form per value: no sign on zero, no leading
// or trailing zeros, integers in full up to maxPlainDigits digits, other
// values as JavaScript writes them but with every significant digit kept.
// It works on the digits as text, so an exponent of any size costs only
// its own length (1e999999999 is not expanded).
func canonicalNumber(s string) string {
	neg, digits, point, ok := decimalParts(s)
	if !ok {
		return s
	}
	// The value is 0.<digits> × 10^point; digits has no leading or
	// trailing zeros.
	if digits == "" {
		return "0"
	}
	var b strings.Builder
	if neg {
		b.WriteByte('-')
	}
	k := int64(len(digits))
	if point.IsInt64() {
		switch n := point.Int64(); {
		case n >= k && n <= maxPlainDigits: // an integer: digits and zeros
			b.WriteString(digits)
			b.WriteString(strings.Repeat("0", int(n-k)))
			return b.String()
		case n > 0 && n < k && n <= maxPlainFrac: // 123.45
			b.WriteString(digits[:n])
			b.WriteByte('.')
			b.WriteString(digits[n:])
			return b.String()
		case n <= 0 && n > minPlainExp: // 0.00012345
			b.WriteString("0.")
			b.WriteString(strings.Repeat("0", int(-n)))
			b.WriteString(digits)
			return b.String()
		}
	}
	// d.ddd e(point-1)
	b.WriteByte(digits[0])
	if len(digits) > 1 {
		b.WriteByte('.')
		b.WriteString(digits[1:])
	}
	b.WriteByte('e')
	b.WriteString(new(big.Int).Sub(point, big.NewInt(1)).String())
	return b.String()
}

// decimalParts splits a JSON number into its sign, its significant digits
// (no leading or trailing zeros; "" for zero) and the power of ten p such
// that the value is 0.<digits> × 10^p. ok is false when s is not a JSON
// number.
func decimalParts(s string) (neg bool, digits string, point *big.Int, ok bool) {
	rest := s
	if strings.HasPrefix(rest, "-") {
		neg, rest = true, rest[1:]
	}
	mant, exp, hasExp := strings.Cut(rest, "e")
	if !hasExp {
		mant, exp, hasExp = strings.Cut(rest, "E")
	}
	intPart, frac, hasFrac := strings.Cut(mant, ".")
	if !allDigits(intPart) || (len(intPart) > 1 && intPart[0] == '0') || (hasFrac && !allDigits(frac)) {
		return false, "", nil, false
	}
	e := new(big.Int)
	if hasExp {
		t := strings.TrimPrefix(strings.TrimPrefix(exp, "+"), "-")
		if !allDigits(t) || len(exp)-len(t) > 1 {
			return false, "", nil, false
		}
		e.SetString(t, 10)
		if strings.HasPrefix(exp, "-") {
			e.Neg(e)
		}
	}
	all := intPart + frac
	lead := len(all) - len(strings.TrimLeft(all, "0"))
	digits = strings.TrimRight(all[lead:], "0")
	if digits == "" {
		return false, "", nil, true // zero, whatever its sign
	}
	// 0.<all> × 10^len(intPart) is the mantissa; each leading zero moves
	// the point one place right.
	point = e.Add(e, big.NewInt(int64(len(intPart)-lead)))
	return neg, digits, point, true
}

func allDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
