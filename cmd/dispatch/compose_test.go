package main

import (
	"os"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// docker-compose.yml runs in insecure mode: it publishes every port on the
// host's loopback only, and its dispatch services name their listeners
// (insecure mode's own default, loopback inside the container, would be
// unreachable from the host and from each other).
func TestComposePublishesOnLoopbackOnly(t *testing.T) {
	b, err := os.ReadFile("../../docker-compose.yml")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Env      map[string]string `yaml:"x-dispatch-env"`
		Services map[string]struct {
			Command     []string          `yaml:"command"`
			Environment map[string]string `yaml:"environment"`
			Ports       []string          `yaml:"ports"`
		} `yaml:"services"`
	}
	if err := yaml.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	if doc.Env["DISPATCH_INSECURE"] != "true" {
		t.Fatalf("the compose file is no longer insecure (DISPATCH_INSECURE=%q): revisit this test", doc.Env["DISPATCH_INSECURE"])
	}
	published := 0
	for name, svc := range doc.Services {
		for _, p := range svc.Ports {
			published++
			if !strings.HasPrefix(p, "127.0.0.1:") {
				t.Errorf("service %s publishes %q on every interface of the host; want 127.0.0.1:…", name, p)
			}
		}
		if len(svc.Command) == 0 {
			continue
		}
		addr := map[string]string{"api": "DISPATCH_HTTP_ADDR", "router": "DISPATCH_ROUTER_ADDR"}[svc.Command[0]]
		if addr != "" && !strings.HasPrefix(svc.Environment[addr], ":") {
			t.Errorf("service %s does not listen on every interface of its container (%s=%q)", name, addr, svc.Environment[addr])
		}
	}
	if published == 0 {
		t.Error("no published port found: the file's shape changed")
	}
}
