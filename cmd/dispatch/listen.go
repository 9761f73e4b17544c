package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
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

// runListen is a local webhook receiver, like `stripe listen`: it prints
// each delivery and whether its signature verifies, and answers a chosen
// status (optionally failing the first N requests to exercise retries).
func runListen(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("listen", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", "127.0.0.1:9000", "address to listen on")
	var secrets stringList
	fs.Var(&secrets, "secret", "signing secret to verify with (repeat for rotation)")
	scheme := fs.String("scheme", "", "FLOWCATALYST or STANDARD_WEBHOOKS (default: detect from headers)")
	status := fs.Int("status", 200, "status to answer")
	failFirst := fs.Int("fail-first", 0, "answer --fail-status to the first N requests")
	failStatus := fs.Int("fail-status", 500, "status for the first --fail-first requests")
	tolerance := fs.Duration("tolerance", webhook.DefaultTolerance, "accepted timestamp skew")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *scheme != "" && !webhook.Scheme(*scheme).Valid() {
		return fmt.Errorf("--scheme must be FLOWCATALYST or STANDARD_WEBHOOKS")
	}
	verifier := webhook.Verifier{Scheme: webhook.Scheme(*scheme), Secrets: secrets, Tolerance: *tolerance}
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
		verdict := "not checked (no --secret)"
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
		fmt.Fprintf(&b, "--- #%d %s %s %s\n", seq, time.Now().UTC().Format(time.RFC3339Nano), r.Method, r.URL.RequestURI())
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
	fmt.Fprintf(stdout, "listening on http://%s (answering %d)\n", ln.Addr(), *status)
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

// redactBearer shows only a token's first characters.
func redactBearer(v string) string {
	tok, ok := strings.CutPrefix(v, "Bearer ")
	if !ok || len(tok) <= 6 {
		return "[redacted]"
	}
	return "Bearer " + tok[:4] + "…[redacted]"
}
