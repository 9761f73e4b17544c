package config_test

import (
	"testing"

	"github.com/dispatchhq/dispatch/config"
)

// Insecure mode serves routes without tokens: unless an address is given,
// it listens on loopback only. A secure start listens on every interface,
// as a server in a container must.
func TestInsecureModeListensOnLoopbackUnlessAnAddressIsGiven(t *testing.T) {
	for _, tc := range []struct {
		name             string
		env              map[string]string
		wantAPI, wantRtr string
	}{
		{"insecure, no address", insecure(nil), "127.0.0.1:8080", "127.0.0.1:8081"},
		{"insecure, addresses given", insecure(map[string]string{"DISPATCH_HTTP_ADDR": ":8080", "DISPATCH_ROUTER_ADDR": "0.0.0.0:9091"}), ":8080", "0.0.0.0:9091"},
		{"insecure, one given", insecure(map[string]string{"DISPATCH_ROUTER_ADDR": ":8081"}), "127.0.0.1:8080", ":8081"},
		{"secure, no address", secure(nil), ":8080", ":8081"},
		{"secure, address given", secure(map[string]string{"DISPATCH_HTTP_ADDR": "10.0.0.5:80"}), "10.0.0.5:80", ":8081"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := mustLoad(t, tc.env)
			if c.HTTPAddr != tc.wantAPI || c.RouterAddr != tc.wantRtr {
				t.Errorf("listeners %q and %q, want %q and %q", c.HTTPAddr, c.RouterAddr, tc.wantAPI, tc.wantRtr)
			}
		})
	}
	if config.InsecureHTTPAddr != "127.0.0.1:8080" || config.InsecureRouterAddr != "127.0.0.1:8081" {
		t.Error("insecure mode's listeners are not on loopback")
	}
}
