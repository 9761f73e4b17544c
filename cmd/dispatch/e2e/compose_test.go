package e2e

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// composeFile is the part of docker-compose.yml these tests read.
type composeFile struct {
	Env      map[string]string `yaml:"x-dispatch-env"`
	Services map[string]struct {
		Command     []string          `yaml:"command"`
		Environment map[string]string `yaml:"environment"`
		Ports       []string          `yaml:"ports"`
	} `yaml:"services"`
}

func readCompose(t *testing.T) composeFile {
	t.Helper()
	b, err := os.ReadFile("../../../docker-compose.yml")
	if err != nil {
		t.Fatal(err)
	}
	var doc composeFile
	if err := yaml.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	return doc
}

// docker-compose.yml runs in insecure mode: it publishes every port on the
// host's loopback only, and its dispatch services name their listeners
// (insecure mode's own default, loopback inside the container, would be
// unreachable from the host and from each other).
func TestComposePublishesOnLoopbackOnly(t *testing.T) {
	t.Parallel()
	doc := readCompose(t)
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

// The README's compose section needs Docker, so no test runs it
// (TestREADMEWalkThroughsRunPastedWhole runs the walk-throughs only); what
// it names must still be in docker-compose.yml: the services it starts and
// reads the logs of, the variables it passes to compose, the host ports it
// calls, the in-network URLs it sends to (a service listening on that
// port), and the settings it says the stack runs with.
func TestREADMEComposeSectionMatchesComposeFile(t *testing.T) {
	t.Parallel()
	doc := readCompose(t)
	readme, err := os.ReadFile("../../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	var section string
	for _, s := range regexp.MustCompile(`(?m)^## `).Split(string(readme), -1) {
		if strings.Contains(strings.SplitN(s, "\n", 2)[0], "Docker Compose") {
			section = s
		}
	}
	blocks := regexp.MustCompile("(?s)```sh\n(.*?)```").FindAllStringSubmatch(section, -1)
	if len(blocks) == 0 {
		t.Fatal(`README.md has no "## … Docker Compose" section with a sh block`)
	}
	var script strings.Builder
	for _, b := range blocks {
		script.WriteString(b[1])
	}
	prose := regexp.MustCompile("(?s)```.*?```").ReplaceAllString(section, "")

	service := func(name, what string) bool {
		t.Helper()
		if _, ok := doc.Services[name]; !ok {
			t.Errorf("the README's compose section %s service %q, which docker-compose.yml does not define", what, name)
			return false
		}
		return true
	}
	// docker compose <verb> [-flags] [services] (up, logs, restart, …).
	assign := `\b([A-Z][A-Z0-9_]*)=(?:\$\([^)\n]*\)|"[^"\n]*"|\S+)[ \t]+`
	commands := regexp.MustCompile(`(?m)(^|\s)#.*$`).ReplaceAllString(script.String(), "") // without comments
	calls := regexp.MustCompile(`(?m)((?:`+assign+`)*)docker compose (\w+)(.*)`).FindAllStringSubmatch(commands, -1)
	named := 0
	for _, c := range calls {
		for _, a := range regexp.MustCompile(assign).FindAllStringSubmatch(c[1], -1) {
			read := false
			for _, svc := range doc.Services {
				for _, v := range svc.Environment {
					read = read || strings.Contains(v, "${"+a[1])
				}
			}
			if !read {
				t.Errorf("the README passes %s to docker compose, which no service of docker-compose.yml reads (${%s…})", a[1], a[1])
			}
		}
		for _, arg := range strings.Fields(c[len(c)-1]) {
			if !strings.HasPrefix(arg, "-") {
				service(arg, "names ("+c[len(c)-2]+")")
				named++
			}
		}
	}
	if named == 0 {
		t.Error("the README's compose section names no service (docker compose up/logs <service>): the section's shape changed")
	}
	// 127.0.0.1:<port> on the host: published there.
	for _, m := range distinctMatches(`127\.0\.0\.1:(\d+)`, script.String()) {
		found := false
		for _, svc := range doc.Services {
			for _, p := range svc.Ports {
				found = found || strings.HasPrefix(p, "127.0.0.1:"+m[1]+":")
			}
		}
		if !found {
			t.Errorf("the README calls %s, which no service publishes", m[0])
		}
	}
	// http://<service>:<port> inside compose's network: that service listens on the port.
	for _, m := range distinctMatches(`http://([a-z][a-z0-9-]*):(\d+)`, script.String()) {
		if !service(m[1], "sends to") {
			continue
		}
		svc := doc.Services[m[1]]
		listens := slices.Contains(svc.Command, ":"+m[2])
		for _, v := range svc.Environment {
			listens = listens || v == ":"+m[2]
		}
		if !listens {
			t.Errorf("the README sends to %s, but service %s does not listen on :%s (command %q)", m[0], m[1], m[2], svc.Command)
		}
	}
	// `NAME=value` in the prose: a service runs with it.
	settings := regexp.MustCompile("`([A-Z][A-Z0-9_]+)=([^`]+)`").FindAllStringSubmatch(prose, -1)
	for _, m := range settings {
		found := false
		for _, svc := range doc.Services {
			found = found || svc.Environment[m[1]] == m[2]
		}
		if !found {
			t.Errorf("the README says the stack runs with %s=%s; no service in docker-compose.yml sets it", m[1], m[2])
		}
	}
	if len(settings) == 0 {
		t.Error("the README's compose section no longer says which demo settings the stack runs with (`DISPATCH_ALLOW_PRIVATE_TARGETS=true`)")
	}
	// The stack publishes the ports of `make run` and its SQS stand-in:
	// the section says to stop those first.
	for _, want := range []string{"stop `make run`", "`make down`", "8080", "9324"} {
		if !strings.Contains(prose, want) {
			t.Errorf("the README's compose section does not say %q (compose publishes the ports make run uses)", want)
		}
	}
}

// distinctMatches is FindAllStringSubmatch without repeats of a whole match.
func distinctMatches(expr, s string) [][]string {
	var out [][]string
	seen := map[string]bool{}
	for _, m := range regexp.MustCompile(expr).FindAllStringSubmatch(s, -1) {
		if !seen[m[0]] {
			seen[m[0]] = true
			out = append(out, m)
		}
	}
	return out
}
