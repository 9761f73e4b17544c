package api

import "testing"

func TestHostAllowed(t *testing.T) {
	t.Parallel()
	public := publicHost("https://Dispatch.Example.com./console/")
	for _, tt := range []struct {
		host string
		want bool
	}{
		{"", true},
		{"127.0.0.1", true},
		{"127.0.0.1:8080", true},
		{"[::1]:8080", true},
		{"192.168.1.20:8080", true},
		{"localhost", true},
		{"LocalHost:8080", true},
		{"localhost.", true},
		{"console.localhost:8080", true},
		{"api:8080", true},
		{"dispatch.example.com", true},
		{"DISPATCH.EXAMPLE.COM:443", true},
		{"evil.example.com", false},
		{"localhost.evil.example", false},
		{"127.0.0.1.nip.io", false},
		{"dispatch.example.com.evil.example", false},
		{":8080", false},
	} {
		if got := hostAllowed(tt.host, public); got != tt.want {
			t.Errorf("hostAllowed(%q) = %v, want %v", tt.host, got, tt.want)
		}
	}
	if hostAllowed("evil.example.com", publicHost("")) {
		t.Error("no public URL allowed a dotted name")
	}
}
