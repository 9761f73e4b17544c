package app

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/dispatchhq/dispatch/config"
)

// commit and date are stamped with version at build time by `make build`
// and the Dockerfile:
//
//	-ldflags "-X github.com/dispatchhq/dispatch/cmd/dispatch/internal/app.version=v1.2.0
//	          -X github.com/dispatchhq/dispatch/cmd/dispatch/internal/app.commit=<sha>
//	          -X github.com/dispatchhq/dispatch/cmd/dispatch/internal/app.date=<RFC 3339>"
var (
	commit = ""
	date   = ""
)

// buildInfo returns the version, commit and build date. A build that was
// not stamped still names its commit when Go recorded it (go build in a
// Git checkout).
func buildInfo() (v, c, d string) {
	v, c, d = version, commit, date
	if bi, ok := debug.ReadBuildInfo(); ok {
		if v == "dev" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			v = bi.Main.Version // go install …@version
		}
		if c == "" {
			var rev, modified string
			for _, s := range bi.Settings {
				switch s.Key {
				case "vcs.revision":
					rev = s.Value
				case "vcs.modified":
					modified = s.Value
				}
			}
			if rev != "" && modified == "true" {
				rev += "-dirty"
			}
			c = rev
		}
	}
	if c == "" {
		c = "unknown"
	}
	if d == "" {
		d = "unknown"
	}
	return v, c, d
}

func printVersion(w io.Writer) {
	v, c, d := buildInfo()
	fmt.Fprintf(w, "dispatch %s\ncommit   %s\nbuilt    %s\ngo       %s %s/%s\n", v, c, d, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

// command is one subcommand, for `dispatch help` and `-h`.
type command struct {
	name, summary, about string
}

var commands = []command{
	{"api", "HTTP API, processing endpoint and outbox publisher",
		"Serves the HTTP API, the console and the processing endpoint, and sends\n" +
			"jobs' pointers to the queue. Applies the schema's migrations at start\n" +
			"unless DISPATCH_AUTO_MIGRATE=false; waits for the database meanwhile\n" +
			"(/health/live answers, /health/ready says what it waits for)."},
	{"router", "message router: long-polls SQS, feeds the processing pools",
		"Receives pointers from the SQS queue and hands each to the processing\n" +
			"endpoint (DISPATCH_PROCESS_URL) within its pool's concurrency. Reads\n" +
			"nothing from the database; writes its report there every 5 s (DATABASE_URL)\n" +
			"for the console, and delivers whether or not that works."},
	{"all", "api and router in one process (local use, small installs)",
		"The API and the router in one process; the router hands pointers to the\n" +
			"processor in process unless DISPATCH_PROCESS_URL is set."},
	{"migrate", "apply the database schema and exit",
		"Applies the embedded migrations under an advisory lock (one process at a\n" +
			"time), says how many it applied and the schema version reached, and exits;\n" +
			"fails, saying why, when the database cannot be reached or was migrated by\n" +
			"a newer dispatch. Reads only the settings below (no token or key). Any\n" +
			"other DISPATCH_* variable in its environment must still be known and\n" +
			"valid, as for api, so it runs with the api's environment unchanged."},
	{"rekey", "re-encrypt credential secrets under DISPATCH_ENCRYPTION_KEY",
		"Re-encrypts every stored secret under DISPATCH_ENCRYPTION_KEY, reading\n" +
			"those sealed under DISPATCH_ENCRYPTION_KEY_PREVIOUS. Run it once every\n" +
			"replica runs with the new key (and the old one as _PREVIOUS). It ends by\n" +
			"saying that no value needs the previous key any more, or fails when a\n" +
			"replica still wrote under another key meanwhile."},
	{"config", "print the settings in effect (secrets masked) and check them",
		"Prints every setting the services read with the value in effect and\n" +
			"where it comes from (set, default, derived), secrets masked; exits\n" +
			"non-zero listing every problem when the configuration is invalid.\n" +
			"Give a command (api, router, all, migrate, rekey) to see only its\n" +
			"settings: dispatch config router."},
	{"listen", "local webhook receiver that verifies signatures",
		"Prints each webhook it receives and whether its signature verifies\n" +
			"(both schemes), and answers a chosen status. The secrets come from\n" +
			"DISPATCH_LISTEN_SECRET (comma-separated) or --secret-file, so they\n" +
			"stay out of ps."},
	{"version", "print the version, commit and build date", ""},
	{"help", "show this help, or a command's: dispatch help api", ""},
}

func usage() string {
	var b strings.Builder
	b.WriteString("usage: dispatch <command> [flags]\n\ncommands:\n")
	for _, c := range commands {
		fmt.Fprintf(&b, "  %-9s %s\n", c.name, c.summary)
	}
	b.WriteString("\nEvery setting is an environment variable and also a flag that overrides\n" +
		"it: DISPATCH_HTTP_ADDR=:9090 or --http-addr=:9090. `dispatch <command> -h`\n" +
		"lists the settings a command reads; `dispatch config` the values in effect.\n" +
		"The pipeline benchmark is a command of its own: cmd/dispatch-bench.")
	return b.String()
}

// wantsHelp reports whether args ask for help.
func wantsHelp(args []string) bool {
	for _, a := range args {
		if a == "-h" || a == "-help" || a == "--help" {
			return true
		}
	}
	return false
}

// printHelp writes the help of one command: what it does, its flags and
// the settings (environment variables) it reads.
func printHelp(w io.Writer, name string) error {
	var cmd *command
	for i := range commands {
		if commands[i].name == name {
			cmd = &commands[i]
		}
	}
	if cmd == nil {
		return fmt.Errorf("unknown command %q (commands: api, router, all, migrate, rekey, config, listen, version)", name)
	}
	switch name {
	case "help":
		fmt.Fprintln(w, usage())
		return nil
	case "version":
		fmt.Fprintf(w, "usage: dispatch version\n\n%s.\n\nStamped at build time by `make build` and the Dockerfile (-ldflags -X on version,\ncommit and date in github.com/dispatchhq/dispatch/cmd/dispatch/internal/app).\n", cmd.summary)
		return nil
	case "listen":
		fmt.Fprintf(w, "usage: dispatch listen [flags]\n\n%s\n\nflags:\n", cmd.about)
		fs, _ := listenFlags()
		fs.SetOutput(w)
		fs.PrintDefaults()
		fmt.Fprintln(w, "  -h, --help\n    \tthis help")
		writeSettings(w, config.SettingsFor("listen"))
		return nil
	}
	args := "[--setting=value ...]"
	if name == "config" {
		args = "[api|router|all|migrate|rekey] [--setting=value ...]"
	}
	fmt.Fprintf(w, "usage: dispatch %s %s\n\n%s\n\n", name, args, cmd.about)
	fmt.Fprintln(w, "Each setting is read from the environment and may be given as a flag, which\n"+
		"wins: DISPATCH_HTTP_ADDR=:9090 or --http-addr=:9090. Secrets are read from the\n"+
		"environment only (or your orchestrator's secret store): ps shows flags.")
	scope := name
	if name == "config" {
		scope = "all"
	}
	writeSettings(w, config.SettingsFor(scope))
	if scope == "api" || scope == "router" || scope == "all" {
		var names []string
		for _, s := range config.SDKSettings {
			names = append(names, s.Name)
		}
		fmt.Fprintf(w, "\nThe AWS SDK's standard chain selects the queue's endpoint, region and\ncredentials: %s, ….\n",
			strings.Join(names, ", "))
	}
	fmt.Fprintln(w, "\nflags:\n  -h, --help   this help")
	return nil
}

func writeSettings(w io.Writer, settings []config.Setting) {
	fmt.Fprintln(w, "\nsettings (flag, environment variable):")
	for _, s := range settings {
		flag := s.Flag() + "  "
		if s.Secret && s.Name != "DATABASE_URL" {
			flag = "" // the environment only: no flag puts it in ps
		}
		def := ""
		if s.Default != "" {
			def = fmt.Sprintf(" (default %s)", s.Default)
		}
		secret := ""
		switch {
		case s.Name == "DATABASE_URL":
			secret = " [secret: as a flag, only without a password]"
		case s.Secret:
			secret = " [secret: environment only]"
		}
		fmt.Fprintf(w, "  %s%s%s\n      %s%s\n", flag, s.Name, secret, s.Help, def)
	}
}

// runConfig prints the settings in effect, secrets masked, and fails
// listing every problem when they are invalid.
func runConfig(args, environ []string, stdout io.Writer) error {
	scope := "all"
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		switch args[0] {
		case "api", "router", "all", "migrate", "rekey":
			scope, args = args[0], args[1:]
		default:
			return fmt.Errorf("config: unknown command %q (api, router, all, migrate or rekey)", args[0])
		}
	}
	overrides, err := settingFlags(args)
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	byFlag := map[string]bool{}
	for _, kv := range overrides {
		name, _, _ := strings.Cut(kv, "=")
		byFlag[name] = true
	}
	environ = append(environ, overrides...)
	getenv := envLookup(environ)
	cfg, err := config.LoadFor(scope, getenv)
	if unknown := config.CheckUnknown(environ); unknown != nil {
		if err == nil {
			err = fmt.Errorf("invalid configuration:\n%w", unknown)
		} else {
			err = fmt.Errorf("%w\n%w", err, unknown)
		}
	}
	var loaded *config.Config
	if err == nil {
		loaded = &cfg
	}
	v, _, _ := buildInfo()
	fmt.Fprintf(stdout, "# dispatch %s: the settings of `dispatch %s` in effect (secrets masked)\n", v, scope)
	values := config.Effective(config.SettingsFor(scope), getenv, loaded)
	width := 0
	for _, v := range values {
		width = max(width, len(v.Name)+1+len(v.Value))
	}
	for _, v := range values {
		source := v.Source
		if source == "set" {
			source = "environment"
			if byFlag[v.Name] {
				source = "flag " + v.Flag()
			}
		}
		fmt.Fprintf(stdout, "%-*s  # %s\n", width, v.Name+"="+v.Value, source)
	}
	if scope != "migrate" && scope != "rekey" {
		for _, s := range config.SDKSettings {
			if raw := getenv(s.Name); raw != "" {
				fmt.Fprintf(stdout, "%-*s  # environment (AWS SDK)\n", width, s.Name+"="+s.Mask(raw))
			}
		}
	}
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, "# valid")
	return nil
}
