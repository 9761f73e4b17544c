// Command gen writes docs/configuration.md from the settings table
// (config.Settings and config.SDKSettings): `go generate ./config`.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/dispatchhq/dispatch/config"
)

func main() {
	out := flag.String("o", "", "file to write (default: standard output)")
	flag.Parse()
	var b bytes.Buffer
	render(&b)
	if *out == "" {
		_, _ = os.Stdout.Write(b.Bytes())
		return
	}
	if err := os.WriteFile(*out, b.Bytes(), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(1)
	}
}

// render writes the configuration document.
func render(w io.Writer) {
	fmt.Fprint(w, `# Configuration

<!-- Generated from the settings table in config/settings.go by
     go generate ./config; edit the table, not this file. -->

Every setting is an environment variable, and also a flag that overrides
it: `+"`dispatch api --http-addr=:9090 --log-level debug`"+`, with
`+"`--database-url`"+` for `+"`DATABASE_URL`"+`. Secrets (marked below) are taken from the
environment only, where ps and shell history do not show them: their
flags are refused, and so is a `+"`--database-url`"+` with a password. All are checked at start: an unknown
`+"`DISPATCH_*`"+` variable, an invalid value, or settings that contradict each
other stop the process with one message that lists every problem.
`+"`dispatch config [command]`"+` prints the value of each in effect and where it
came from (secrets masked), and `+"`dispatch <command> -h`"+` the ones a command
reads. "read by" names the commands: `+"`all`"+` reads what `+"`api`"+` and `+"`router`"+` read.

| variable | default | accepted | read by | meaning |
|---|---|---|---|---|
`)
	for _, s := range config.Settings {
		name := code(s.Name)
		if s.Secret {
			name += " (secret)"
		}
		meaning := s.Help
		if s.Doc != "" {
			meaning += ". " + s.Doc
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s |\n",
			name, orDash(code(s.Default)), orDash(cell(s.Range)), strings.Join(s.Commands, ", "), cell(meaning))
	}
	fmt.Fprint(w, `
A secret is never printed: `+"`dispatch config`"+` shows tokens and keys as `+"`****`"+`
and masks the password of `+"`DATABASE_URL`"+`.

## Read by the AWS SDK

The queue client uses the AWS SDK's standard chain, so these select the
endpoint (ElasticMQ, LocalStack, the SQS stand-in, or real SQS) and the
credentials:

| variable | meaning |
|---|---|
`)
	for _, s := range config.SDKSettings {
		name := code(s.Name)
		if s.Secret {
			name += " (secret)"
		}
		fmt.Fprintf(w, "| %s | %s |\n", name, cell(s.Help))
	}
	fmt.Fprint(w, `
## Read by the Go runtime

`+"`GOMAXPROCS`, `GOGC` and `GOMEMLIMIT`"+` are read by the Go runtime, not by
dispatch. Without `+"`GOMAXPROCS`"+`, a process runs on one P while it is nearly
idle and on the runtime's default once busy
([adaptive-procs](decisions/adaptive-procs.md)); setting it fixes the number.
`)
}

// code formats a value as inline code ("" stays empty).
func code(s string) string {
	if s == "" {
		return ""
	}
	return "`" + strings.ReplaceAll(s, "|", `\|`) + "`"
}

// cell escapes a table cell.
func cell(s string) string { return strings.ReplaceAll(s, "|", `\|`) }

func orDash(s string) string {
	if s == "" {
		return "—"
	}
	return s
}
