package config

import (
	"fmt"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The table that -h, `dispatch config` and docs/configuration.md print is
// what Load reads: every variable Load asks for is listed as read by a
// service command, and every variable so listed is asked for.
func TestSettingsTableIsWhatLoadReads(t *testing.T) {
	listed := map[string]bool{}
	for _, s := range Settings {
		if listed[s.Name] {
			t.Errorf("%s is listed twice", s.Name)
		}
		listed[s.Name] = true
		if s.Help == "" || len(s.Commands) == 0 {
			t.Errorf("%s has no help or no command", s.Name)
		}
	}
	read := map[string]bool{}
	_, _ = Load(func(name string) string { read[name] = true; return "" })
	for name := range read {
		if !known[name] {
			t.Errorf("Load reads %s but the settings table does not list it as read by api, router, migrate or rekey", name)
		}
	}
	for name := range known {
		if !read[name] {
			t.Errorf("the settings table lists %s as read by a service, but Load does not read it", name)
		}
	}
}

// The ranges the table states as "low–high" are Load's: both ends load,
// one step beyond either is refused, naming the variable.
func TestSettingsTableRangesAreLoadsRanges(t *testing.T) {
	bounds := regexp.MustCompile(`^(\S+)–(\S+)$`)
	load := func(name, value string) error {
		env := map[string]string{"DISPATCH_INSECURE": "true", name: value}
		_, err := Load(func(k string) string { return env[k] })
		return err
	}
	checked := 0
	for _, s := range Settings {
		m := bounds.FindStringSubmatch(s.Range)
		if m == nil {
			continue
		}
		var lo, hi, below, above string
		if a, err := strconv.ParseInt(m[1], 10, 64); err == nil {
			b, err := strconv.ParseInt(m[2], 10, 64)
			if err != nil {
				t.Errorf("%s: range %q does not parse", s.Name, s.Range)
				continue
			}
			lo, hi, below, above = m[1], m[2], fmt.Sprint(a-1), fmt.Sprint(b+1)
		} else {
			a, err1 := time.ParseDuration(m[1])
			b, err2 := time.ParseDuration(m[2])
			if err1 != nil || err2 != nil {
				t.Errorf("%s: range %q is neither whole numbers nor durations", s.Name, s.Range)
				continue
			}
			lo, hi, below, above = m[1], m[2], (a - time.Millisecond).String(), (b + time.Millisecond).String()
		}
		checked++
		for _, v := range []string{lo, hi} {
			if err := load(s.Name, v); err != nil {
				t.Errorf("%s=%s (an end of the table's range %s) is refused: %v", s.Name, v, s.Range, err)
			}
		}
		for _, v := range []string{below, above} {
			if err := load(s.Name, v); err == nil || !strings.Contains(err.Error(), s.Name) {
				t.Errorf("%s=%s (outside the table's range %s) is accepted", s.Name, v, s.Range)
			}
		}
	}
	if checked < 10 {
		t.Errorf("only %d ranges checked; the table's ranges are not written low–high", checked)
	}
}

// Each default the table states is the one Load uses: setting it
// explicitly changes nothing.
func TestSettingsTableDefaultsAreLoadsDefaults(t *testing.T) {
	base := map[string]string{"DISPATCH_NODE_ID": "7", "DISPATCH_API_TOKENS": "api-token-0123456789",
		"DISPATCH_ADMIN_TOKEN": "admin-token-0123456789", "DISPATCH_INTERNAL_TOKEN": "internal-token-0123456789",
		"DISPATCH_ENCRYPTION_KEY": "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="}
	load := func(extra map[string]string) Config {
		m := map[string]string{}
		for k, v := range base {
			m[k] = v
		}
		for k, v := range extra {
			m[k] = v
		}
		c, err := Load(func(k string) string { return m[k] })
		if err != nil {
			t.Fatalf("Load(%v): %v", m, err)
		}
		c.ProcessURLSet = false // records that the variable was given
		return c
	}
	want := load(nil)
	for _, s := range Settings {
		if s.Default == "" || base[s.Name] != "" || strings.Contains(s.Default, " ") || !IsSetting(s.Name) {
			continue // no default, set by the base, or prose
		}
		if got := load(map[string]string{s.Name: s.Default}); !reflect.DeepEqual(got, want) {
			t.Errorf("%s=%s (the table's default) loads differently from leaving it unset", s.Name, s.Default)
		}
	}
}

func TestMaskHidesSecrets(t *testing.T) {
	db := Setting{Name: "DATABASE_URL", Secret: true}
	tok := Setting{Name: "DISPATCH_API_TOKENS", Secret: true}
	for _, tc := range []struct {
		s          Setting
		in, want   string
		mustNotSee string
	}{
		{db, "postgres://app:s3cret@db.internal:5432/dispatch?sslmode=require", "postgres://app:****@db.internal:5432/dispatch?sslmode=require", "s3cret"},
		{db, "postgres://app@db/dispatch?password=s3cret&sslmode=disable", "postgres://app@db/dispatch?password=****&sslmode=disable", "s3cret"},
		{db, "host=db user=app password=s3cret dbname=dispatch", "host=db user=app password=**** dbname=dispatch", "s3cret"},
		{db, "host=db password='s3 cret' dbname=dispatch", "host=db password=**** dbname=dispatch", "s3 cret"},
		{db, "postgres://postgres@127.0.0.1:5432/dispatch", "postgres://postgres@127.0.0.1:5432/dispatch", ""},
		{db, "postgres://app@db/dispatch?sslkey=/k.pem&sslmode=verify-full&sslpassword=hunter2", "postgres://app@db/dispatch?sslkey=%2Fk.pem&sslmode=verify-full&sslpassword=****", "hunter2"},
		{db, "host=db user=app sslpassword=hunter2 dbname=dispatch", "host=db user=app sslpassword=**** dbname=dispatch", "hunter2"},
		// Go's URL parser refuses these; pgx connects with the first.
		{db, "postgres://app:Xy#9k!pQ@db.internal:5432/dispatch", "postgres://app:****@db.internal:5432/dispatch", "Xy#9k"},
		{db, "postgres://app:p%zz/w@db:notaport/x", "postgres://app:****@db:notaport/x", "p%zz"},
		{db, "postgres://app:a@b@db/x?password=s3cret", "postgres://app:****@db/x?password=****", "s3cret"},
		{Setting{Name: "DISPATCH_PUBLIC_URL"}, "https://ops:hunter2@dispatch.example.com", "https://ops:****@dispatch.example.com", "hunter2"},
		{tok, "token-one-0123456789,token-two-0123456789", "****,****", "token"},
		{Setting{Name: "DISPATCH_HTTP_ADDR"}, ":8080", ":8080", ""},
	} {
		got := tc.s.Mask(tc.in)
		if got != tc.want {
			t.Errorf("Mask(%q) = %q, want %q", tc.in, got, tc.want)
		}
		if tc.mustNotSee != "" && strings.Contains(got, tc.mustNotSee) {
			t.Errorf("Mask(%q) shows %q", tc.in, tc.mustNotSee)
		}
	}
}
