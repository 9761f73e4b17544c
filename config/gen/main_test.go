package main

import (
	"bytes"
	"os"
	"testing"
)

// docs/configuration.md is what the settings table generates.
func TestConfigurationDocIsUpToDate(t *testing.T) {
	var want bytes.Buffer
	render(&want)
	got, err := os.ReadFile("../../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want.Bytes()) {
		t.Fatal("docs/configuration.md is out of date with the settings table in config/settings.go: run go generate ./config")
	}
}
