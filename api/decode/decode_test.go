package decode

import (
	"slices"
	"strings"
	"testing"

	"github.com/dispatchhq/dispatch"
)

func TestParseObject(t *testing.T) {
	f, err := Object([]byte(`{"name":"a","extra":1}`), "name", "other")
	if err != nil {
		t.Fatal(err)
	}
	if got := f.String("name", 10, true); got != "a" {
		t.Errorf("name = %q", got)
	}
	if f.Has("other") || !f.Has("name") {
		t.Errorf("Has is wrong")
	}
	f.String("other", 10, true)
	f.Add("name", "is taken")
	got := problemFields(t, f.Err())
	for _, want := range []string{"extra", "other", "name"} {
		if !slices.Contains(got, want) {
			t.Errorf("details %v do not name %q", got, want)
		}
	}

	f, err = Object(nil)
	if err != nil || f.Err() != nil {
		t.Errorf("empty body: %v %v", err, f.Err())
	}
	if _, err := Object([]byte(`[1]`)); err == nil {
		t.Errorf("array body accepted")
	}
}

func TestObjectAllowedTargets(t *testing.T) {
	f, err := Object([]byte(`{"allowedTargets":["HTTPS://P.example:443/","https://p.example","ftp://x",3,"https://a@b"]}`), "allowedTargets")
	if err != nil {
		t.Fatal(err)
	}
	got := f.AllowedTargets("allowedTargets")
	if len(got) != 1 || got[0] != "https://p.example" {
		t.Errorf("entries %q, want the one normalised origin", got)
	}
	var fields []string
	for _, d := range f.Err().(*dispatch.Error).Details {
		fields = append(fields, d.Field)
	}
	if strings.Join(fields, ",") != "allowedTargets[2],allowedTargets[3],allowedTargets[4]" {
		t.Errorf("problems with %v, want every bad entry", fields)
	}
	f, _ = Object([]byte(`{"allowedTargets":"https://p.example"}`), "allowedTargets")
	if f.AllowedTargets("allowedTargets"); f.Err() == nil {
		t.Errorf("a string in place of an array was accepted")
	}
}
