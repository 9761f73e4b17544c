package dispatch_test

import (
	"encoding/json"
	"math/big"
	"strconv"
	"strings"
	"testing"

	"github.com/dispatchhq/dispatch"
)

// groupOf is the ordering group subscription 7 with orderingKey /k gives an
// event whose data is {"k": <value>}, value written as JSON text.
func groupOf(t *testing.T, value string) string {
	t.Helper()
	d := json.NewDecoder(strings.NewReader(`{"k":` + value + `}`))
	d.UseNumber() // as the API decodes an event's data
	var data any
	if err := d.Decode(&data); err != nil {
		t.Fatalf("%s: %v", value, err)
	}
	return dispatch.OrderingGroup(7, "/k", data)
}

// Equal numbers are one ordering key however they are written: events for
// customer 1 stay in order whether a producer writes 1, 1.0 or 1e0.
func TestOrderingGroupNumbersByValue(t *testing.T) {
	same := [][]string{
		{"1", "1.0", "1e0", "10e-1", "1E+0", "0.1e1", "1.000000000000000000000000000000"},
		{"0", "-0", "0.0", "0e10", "-0.0e-5"},
		{"-42", "-42.00", "-4.2e1", "-420e-1"},
		{"1.5", "15e-1", "0.15E1", "1.50"},
		{"100", "1e2", "1E2", "0.001e5"},
		{"12345678901234567890", "12345678901234567890.0", "1234567890123456789e1"},
		{"0.000001", "1e-6", "10e-7"},
		{"1e300", "10e299", "1.0e300"},
		{"-2.5e-20", "-25e-21"},
	}
	for _, forms := range same {
		want := groupOf(t, forms[0])
		for _, f := range forms[1:] {
			if got := groupOf(t, f); got != want {
				t.Errorf("%s gives %q, %s gives %q: equal numbers, two groups", forms[0], want, f, got)
			}
		}
	}
	// Integers keep the group they always had (a deploy regroups no
	// in-flight key written as an integer), and nothing is hashed away.
	for value, want := range map[string]string{
		"1": "sub-7-1", "1.0": "sub-7-1", "-0": "sub-7-0", "1e2": "sub-7-100",
		"12345678901234567890": "sub-7-12345678901234567890",
		"1.50":                 "sub-7-1.5", "1e-6": "sub-7-0.000001", "1e-7": "sub-7-1e-7",
		"1e300": "sub-7-1e300", "-2.5e-20": "sub-7--2.5e-20",
	} {
		if got := groupOf(t, value); got != want {
			t.Errorf("%s gives %q, want %q", value, got, want)
		}
	}
}

// Different numbers are different keys, however close: no rounding to
// float64 merges two big integers or two long decimals.
func TestOrderingGroupDistinctNumbersStayApart(t *testing.T) {
	distinct := []string{
		"1", "2", "-1", "1.1", "0.1", "10", "1e-7", "1e7",
		"12345678901234567890", "12345678901234567891", // float64 would make these one
		"9007199254740993", "9007199254740992",
		"1.00000000000000000001", "0.99999999999999999999",
		"1e400", "1e401", "1e-400",
		"123456789012345678901234567890123456789012345678901234567890123456789012345678901234567890123456789012345",
		"123456789012345678901234567890123456789012345678901234567890123456789012345678901234567890123456789012346",
	}
	seen := map[string]string{}
	for _, v := range distinct {
		g := groupOf(t, v)
		if other, ok := seen[g]; ok {
			t.Errorf("%s and %s share group %q", v, other, g)
		}
		seen[g] = v
		if len(g) > dispatch.MaxGroupIDLen {
			t.Errorf("%s: group %q is longer than SQS allows", v, g)
		}
	}
}

// A string is the key as written; a number is the key by value. A number's
// group is its canonical text, so the string "1" and the number 1 share
// one (a producer that writes an id sometimes as "42" and sometimes as 42
// keeps its order), while the string "1.0" keeps its own text.
func TestOrderingGroupStringsAndNumbers(t *testing.T) {
	if s, n := groupOf(t, `"1"`), groupOf(t, `1`); s != n {
		t.Errorf(`string "1" gives %q, number 1 gives %q: want one group`, s, n)
	}
	if s, n := groupOf(t, `"1.0"`), groupOf(t, `1.0`); s == n {
		t.Errorf(`string "1.0" and number 1.0 share %q: a string is taken as written`, s)
	}
	if a, b := groupOf(t, `"a"`), groupOf(t, `"A"`); a == b {
		t.Errorf("strings differing in case share %q", a)
	}
	// Numbers inside an object or array key are compared by value too.
	if a, b := groupOf(t, `{"x":[1,2.50]}`), groupOf(t, `{"x":[1.0,25e-1]}`); a != b {
		t.Errorf("composite keys with equal numbers: %q and %q", a, b)
	}
	if a, b := groupOf(t, `[1]`), groupOf(t, `[2]`); a == b {
		t.Errorf("[1] and [2] share %q", a)
	}
}

// FuzzOrderingGroupNumber checks that any JSON number gives a group SQS
// accepts, without panicking, and that writing it with a different
// exponent (the same value) gives the same group.
func FuzzOrderingGroupNumber(f *testing.F) {
	for _, s := range []string{"1", "1.0", "-0", "1e0", "12345678901234567890", "1e99999999999999999999",
		"-1.5E-99999999999999999999", "0.000000000000000000000000000001", "123.456e-789"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d := json.NewDecoder(strings.NewReader(`{"k":` + s + `}`))
		d.UseNumber()
		var data any
		if d.Decode(&data) != nil || d.More() {
			return
		}
		n, ok := data.(map[string]any)["k"].(json.Number)
		if !ok {
			return
		}
		g := dispatch.OrderingGroup(1, "/k", data)
		if g == "" || len(g) > dispatch.MaxGroupIDLen || strings.ContainsAny(g, " \t\r\n\x00") {
			t.Fatalf("%s: group %q", s, g)
		}
		// The same value with its exponent moved by one: 10 times the
		// mantissa, exponent one less.
		mant, exp, hasExp := strings.Cut(strings.ToLower(string(n)), "e")
		if !hasExp || strings.ContainsAny(mant, ".") || strings.TrimPrefix(mant, "-") == "0" { // 00 is no JSON number
			return
		}
		if len(exp) > 15 {
			return
		}
		var e int64
		neg := strings.HasPrefix(exp, "-")
		exp = strings.TrimLeft(exp, "+-")
		for _, c := range exp {
			e = e*10 + int64(c-'0')
		}
		if neg {
			e = -e
		}
		moved := mant + "0e" + strconv.FormatInt(e-1, 10)
		if g2 := dispatch.OrderingGroup(1, "/k", map[string]any{"k": json.Number(moved)}); g2 != g {
			t.Fatalf("%s gives %q but %s gives %q", s, g, moved, g2)
		}
	})
}

// FuzzOrderingGroupNumbersByValue checks that two JSON numbers share a
// group exactly when they are equal, against math/big's exact rationals
// (for exponents small enough for big.Rat to expand).
func FuzzOrderingGroupNumbersByValue(f *testing.F) {
	f.Add("1", "1.0")
	f.Add("12345678901234567890", "12345678901234567891")
	f.Add("-0", "0e5")
	f.Add("1.5e-3", "0.0015")
	f.Add("1e21", "1000000000000000000000.0")
	f.Fuzz(func(t *testing.T, a, b string) {
		ra, oka := smallRat(a)
		rb, okb := smallRat(b)
		if !oka || !okb {
			return
		}
		ga := dispatch.OrderingGroup(1, "", json.Number(a))
		gb := dispatch.OrderingGroup(1, "", json.Number(b))
		if equal := ra.Cmp(rb) == 0; equal != (ga == gb) {
			t.Fatalf("%s and %s: equal %v, groups %q and %q", a, b, equal, ga, gb)
		}
	})
}

// smallRat is s as an exact rational when s is a JSON number whose
// exponent is below 400 either way.
func smallRat(s string) (*big.Rat, bool) {
	var n json.Number
	if json.Unmarshal([]byte(s), &n) != nil || string(n) != s {
		return nil, false
	}
	if _, exp, ok := strings.Cut(strings.ToLower(s), "e"); ok {
		e, err := strconv.Atoi(exp)
		if err != nil || e > 400 || e < -400 {
			return nil, false
		}
	}
	r, ok := new(big.Rat).SetString(s)
	return r, ok
}
