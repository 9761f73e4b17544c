package app

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/dispatchhq/dispatch"
	"github.com/dispatchhq/dispatch/webhook"
)

type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

// listenOptions are the flags of `dispatch listen`.
type listenOptions struct {
	addr, scheme, secretFile string
	secrets                  stringList
	status, failFirst        int
	failStatus               int
	tolerance                time.Duration
}

// listenFlags declares listen's flags on a new flag set (Run parses it,
// `dispatch listen -h` prints it).
func listenFlags() (*flag.FlagSet, *listenOptions) {
	o := &listenOptions{}
	fs := flag.NewFlagSet("listen", flag.ContinueOnError)
	fs.StringVar(&o.addr, "addr", "127.0.0.1:9000", "address to listen on")
	fs.StringVar(&o.secretFile, "secret-file", "", "file holding the signing secrets to verify with, one per line (rotation: two)")
	fs.Var(&o.secrets, "secret", "signing secret to verify with (repeat for rotation); visible in ps: prefer DISPATCH_LISTEN_SECRET or --secret-file")
	fs.StringVar(&o.scheme, "scheme", "", "FLOWCATALYST or STANDARD_WEBHOOKS (default: detect from headers)")
	fs.IntVar(&o.status, "status", 200, "status to answer")
	fs.IntVar(&o.failFirst, "fail-first", 0, "answer --fail-status to the first N requests")
	fs.IntVar(&o.failStatus, "fail-status", 500, "status for the first --fail-first requests")
	fs.DurationVar(&o.tolerance, "tolerance", webhook.DefaultTolerance, "accepted timestamp skew")
	return fs, o
}

// listenSecrets gathers the secrets to verify with: DISPATCH_LISTEN_SECRET
// (comma-separated), the lines of --secret-file, and --secret, which ps
// shows to every user of the machine (warned about).
func listenSecrets(o *listenOptions, getenv func(string) string, stderr io.Writer) ([]string, error) {
	var out []string
	for _, s := range strings.Split(getenv("DISPATCH_LISTEN_SECRET"), ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	if o.secretFile != "" {
		b, err := os.ReadFile(o.secretFile)
		if err != nil {
			return nil, fmt.Errorf("--secret-file: %w", err)
		}
		n := len(out)
		for _, line := range strings.Split(string(b), "\n") {
			if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
				out = append(out, line)
			}
		}
		if len(out) == n {
			return nil, fmt.Errorf("--secret-file %s holds no secret", o.secretFile)
		}
	}
	if len(o.secrets) > 0 {
		fmt.Fprintln(stderr, "warning: --secret puts the secret where ps and shell history show it; "+
			"use DISPATCH_LISTEN_SECRET or --secret-file instead")
		out = append(out, o.secrets...)
	}
	return out, nil
}

// runListen is a local webhook receiver, like `stripe listen`: it prints
// each delivery and whether its signature verifies, and answers a chosen
// status (optionally failing the first N requests to exercise retries).
func runListen(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs, o := listenFlags()
	fs.SetOutput(stderr)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("listen: unexpected argument %q (see dispatch listen -h)", fs.Arg(0))
	}
	secrets, err := listenSecrets(o, getenv, stderr)
	if err != nil {
		return err
	}
	addr, scheme, status, failFirst, failStatus := &o.addr, &o.scheme, &o.status, &o.failFirst, &o.failStatus
	if *scheme != "" && !webhook.Scheme(*scheme).Valid() {
		return fmt.Errorf("--scheme must be FLOWCATALYST or STANDARD_WEBHOOKS")
	}
	for _, st := range []struct {
		flag string
		code int
	}{{"--status", *status}, {"--fail-status", *failStatus}} {
		if st.code < 200 || st.code > 599 {
			return fmt.Errorf("%s must be an HTTP status from 200 to 599 (got %d)", st.flag, st.code)
		}
	}
	verifier := webhook.Verifier{Scheme: webhook.Scheme(*scheme), Secrets: secrets, Tolerance: o.tolerance}
	var (
		mu sync.Mutex
		n  int
	)
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		n++
		seq := n
		mu.Unlock()
		body, _ := io.ReadAll(io.LimitReader(r.Body, webhook.MaxPayloadBytes))
		verdict := "not checked (no secret: DISPATCH_LISTEN_SECRET or --secret-file)"
		if len(secrets) > 0 {
			r.Body = io.NopCloser(strings.NewReader(string(body)))
			if _, err := verifier.VerifyRequest(r); err != nil {
				verdict = "INVALID: " + err.Error()
			} else {
				verdict = "valid"
			}
		}
		code := *status
		if seq <= *failFirst {
			code = *failStatus
		}
		var b strings.Builder
		// The time as the FLOWCATALYST timestamp header has it: RFC 3339,
		// UTC, to the millisecond.
		fmt.Fprintf(&b, "--- #%d %s %s %s\n", seq, time.Now().UTC().Format(webhook.TimestampLayout), r.Method, r.URL.RequestURI())
		names := make([]string, 0, len(r.Header))
		for k := range r.Header {
			names = append(names, k)
		}
		sort.Strings(names)
		for _, k := range names {
			v := strings.Join(r.Header[k], ", ")
			if strings.EqualFold(k, "Authorization") {
				v = redactBearer(v)
			}
			fmt.Fprintf(&b, "%s: %s\n", k, v)
		}
		fmt.Fprintf(&b, "\n%s\n", body)
		// A subscription's verification handshake: echo the challenge of a
		// correctly signed request (any request when no --secret is given).
		var hs struct {
			Type      string `json:"type"`
			Challenge string `json:"challenge"`
		}
		var reply []byte
		if json.Unmarshal(body, &hs) == nil && hs.Type == dispatch.VerificationType && !strings.HasPrefix(verdict, "INVALID") && code < 300 {
			reply, _ = json.Marshal(map[string]string{"challenge": hs.Challenge})
			fmt.Fprintf(&b, "verification handshake: challenge echoed\n")
		}
		fmt.Fprintf(&b, "signature: %s\nanswered: %d\n", verdict, code)
		mu.Lock()
		fmt.Fprint(stdout, b.String())
		mu.Unlock()
		if reply != nil {
			w.Header().Set("Content-Type", "application/json")
		}
		w.WriteHeader(code)
		_, _ = w.Write(reply)
	})
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "listening on http://%s (%s; verifying with %d secret(s))\n", ln.Addr(), answering(*status, *failFirst, *failStatus), len(secrets))
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		_ = srv.Shutdown(context.Background())
	}()
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// answering says what listen answers, for its banner.
func answering(status, failFirst, failStatus int) string {
	switch {
	case failFirst == 1:
		return fmt.Sprintf("failing the first request with %d, then answering %d", failStatus, status)
	case failFirst > 1:
		return fmt.Sprintf("failing the first %d requests with %d, then answering %d", failFirst, failStatus, status)
	}
	return fmt.Sprintf("answering %d", status)
}

// redactBearer shows only a token's first characters.
func redactBearer(v string) string {
	tok, ok := strings.CutPrefix(v, "Bearer ")
	if !ok || len(tok) <= 6 {
		return "[redacted]"
	}
	return "Bearer " + tok[:4] + "…[redacted]"
}
