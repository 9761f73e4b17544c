package config

import (
	"reflect"
	"strings"
	"testing"
)

// The table that -h and `dispatch config` print is what Load reads.
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
		if !IsSetting(s.Name) && !otherCommands[s.Name] {
			t.Errorf("%s is listed but Load does not read it", s.Name)
		}
	}
	for name := range known {
		if !listed[name] {
			t.Errorf("Load reads %s but the settings table does not list it", name)
		}
	}
	if !listed["DATABASE_URL"] {
		t.Error("DATABASE_URL is not listed")
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
