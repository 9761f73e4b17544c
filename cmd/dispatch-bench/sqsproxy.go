package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"
)

// The service's SQS requests, counted: the children are given a reverse
// proxy in front of the SQS endpoint as theirs, and the proxy counts each
// request by action (the JSON protocol's X-Amz-Target) and the messages it
// carried. The proxy runs as a child process of its own (this binary with
// the hidden command sqs-proxy), so that its CPU, a few tenths of a
// millisecond per delivery at low rates, is reported apart from the load
// generator's and can be taken out of the whole box's.

const (
	sqsProxyCommand  = "sqs-proxy"                   // dispatch-bench sqs-proxy: the proxy's process
	sqsProxyUpstream = "DISPATCH_BENCH_SQS_UPSTREAM" // the endpoint it forwards to
	sqsCountsPath    = "/dispatch-bench/sqs-counts"  // GET: the counts so far, as JSON
)

// sqsBatchActions are the actions whose requests name several messages
// (counted from the request's Entries) and ReceiveMessage (counted from the
// answer's Messages).
var sqsBatchActions = map[string]bool{
	"SendMessageBatch": true, "DeleteMessageBatch": true, "ChangeMessageVisibilityBatch": true, "ReceiveMessage": true,
}

// sqsCount is what the proxy saw of one action.
type sqsCount struct {
	Requests int64 `json:"requests"`
	Messages int64 `json:"messages"`
}

// sqsProxy is the counting reverse proxy, an http.Handler.
type sqsProxy struct {
	proxy  *httputil.ReverseProxy
	stderr io.Writer

	mu     sync.Mutex
	counts map[string]sqsCount // by action, without the "AmazonSQS." prefix
}

func newSQSProxy(target *url.URL, stderr io.Writer) *sqsProxy {
	p := &sqsProxy{stderr: stderr, counts: map[string]sqsCount{}}
	p.proxy = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) { pr.SetURL(target) },
		// The service holds many connections (a long poll each): keep as
		// many to the endpoint, or each request would dial.
		Transport: &http.Transport{
			DialContext:         (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
			MaxIdleConns:        256,
			MaxIdleConnsPerHost: 256,
			IdleConnTimeout:     time.Minute,
		},
		ModifyResponse: p.countReceived,
		ErrorHandler:   p.proxyError,
		BufferPool:     &proxyBuffers{},
	}
	return p
}

// proxyBuffers reuses the buffers ReverseProxy copies answers through,
// which it would otherwise allocate, 32 KiB each, per request.
type proxyBuffers struct{ pool sync.Pool }

func (b *proxyBuffers) Get() []byte {
	if buf, ok := b.pool.Get().(*[]byte); ok {
		return *buf
	}
	return make([]byte, 32<<10)
}

func (b *proxyBuffers) Put(buf []byte) { b.pool.Put(&buf) }

func sqsAction(h http.Header) string {
	if t := h.Get("X-Amz-Target"); t != "" {
		return strings.TrimPrefix(t, "AmazonSQS.")
	}
	return "(no X-Amz-Target)"
}

func (p *sqsProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodGet && r.URL.Path == sqsCountsPath {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(p.snapshot())
		return
	}
	action := sqsAction(r.Header)
	var entries int
	if sqsBatchActions[action] && action != "ReceiveMessage" {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, "bench: SQS proxy: read request: "+err.Error(), http.StatusBadGateway)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		var in struct{ Entries []json.RawMessage }
		if json.Unmarshal(body, &in) == nil {
			entries = len(in.Entries)
		}
	}
	p.add(action, 1, entries)
	p.proxy.ServeHTTP(w, r)
}

// countReceived counts the messages a ReceiveMessage answer hands out.
func (p *sqsProxy) countReceived(resp *http.Response) error {
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Encoding") != "" ||
		sqsAction(resp.Request.Header) != "ReceiveMessage" {
		return nil
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return err
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	var out struct{ Messages []json.RawMessage }
	if json.Unmarshal(body, &out) == nil {
		p.add("ReceiveMessage", 0, len(out.Messages))
	}
	return nil
}

// proxyError answers 502 as ReverseProxy does, and stays quiet about the
// requests a child gave up on itself (its long polls, when it stops).
func (p *sqsProxy) proxyError(w http.ResponseWriter, r *http.Request, err error) {
	if r.Context().Err() == nil {
		fmt.Fprintf(p.stderr, "bench: SQS proxy: %s: %v\n", sqsAction(r.Header), err)
	}
	w.WriteHeader(http.StatusBadGateway)
}

func (p *sqsProxy) add(action string, requests, messages int) {
	p.mu.Lock()
	c := p.counts[action]
	c.Requests += int64(requests)
	c.Messages += int64(messages)
	p.counts[action] = c
	p.mu.Unlock()
}

// snapshot returns the counts so far.
func (p *sqsProxy) snapshot() map[string]sqsCount {
	p.mu.Lock()
	defer p.mu.Unlock()
	return maps.Clone(p.counts)
}

// runSQSProxy is the proxy's process: it forwards to $DISPATCH_BENCH_SQS_UPSTREAM,
// prints "sqs-proxy listening on ADDR" and serves until ctx ends (SIGTERM).
// Its connections are closed at once then: the service is gone, and a long
// poll left would hold a graceful shutdown for up to 20 s.
func runSQSProxy(ctx context.Context, getenv func(string) string, stdout, stderr io.Writer) error {
	target, err := url.Parse(getenv(sqsProxyUpstream))
	if err != nil || target.Host == "" {
		return fmt.Errorf("bench: %s: %s %q is not a URL", sqsProxyCommand, sqsProxyUpstream, getenv(sqsProxyUpstream))
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("bench: %s: %w", sqsProxyCommand, err)
	}
	p := newSQSProxy(target, stderr)
	srv := &http.Server{Handler: p, ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(stdout, "%s listening on %s\n", sqsProxyCommand, ln.Addr())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err := <-done:
		return fmt.Errorf("bench: %s: %w", sqsProxyCommand, err)
	case <-ctx.Done():
	}
	_ = srv.Close()
	p.proxy.Transport.(*http.Transport).CloseIdleConnections()
	if err := <-done; !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("bench: %s: %w", sqsProxyCommand, err)
	}
	return nil
}

// sqsProxyChild is the proxy's process as the benchmark sees it.
type sqsProxyChild struct {
	*benchChild
	url    string
	client *http.Client
}

// startSQSProxyChild runs exe (this binary) as the proxy in front of
// upstream.
func startSQSProxyChild(ctx context.Context, exe, upstream string, environ []string, stderr io.Writer) (*sqsProxyChild, error) {
	env := append(slices.Clone(environ), sqsProxyUpstream+"="+upstream)
	c, addrs, err := startBenchChild(ctx, exe, sqsProxyCommand, env, stderr, sqsProxyCommand)
	if err != nil {
		return nil, err
	}
	return &sqsProxyChild{benchChild: c, url: "http://" + addrs[sqsProxyCommand],
		client: &http.Client{Timeout: 10 * time.Second}}, nil
}

// counts asks the proxy for its counts so far.
func (p *sqsProxyChild) counts(ctx context.Context) (map[string]sqsCount, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.url+sqsCountsPath, nil)
	if err != nil {
		return nil, err
	}
	resp, err := p.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("bench: SQS proxy counts: %w", err)
	}
	defer resp.Body.Close()
	var out map[string]sqsCount
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("bench: SQS proxy counts: HTTP %d", resp.StatusCode)
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return nil, fmt.Errorf("bench: SQS proxy counts: %w", err)
	}
	return out, nil
}

func (p *sqsProxyChild) pid() int { return p.cmd.Process.Pid }

// sqsActionUse is one action's requests and messages over the load.
type sqsActionUse struct {
	action string
	sqsCount
}

// sqsUse is the requests between two snapshots, by action, the most
// requests first.
func sqsUse(a, b map[string]sqsCount) []sqsActionUse {
	var out []sqsActionUse
	for action, c := range b {
		d := sqsCount{Requests: c.Requests - a[action].Requests, Messages: c.Messages - a[action].Messages}
		if d.Requests > 0 || d.Messages > 0 {
			out = append(out, sqsActionUse{action, d})
		}
	}
	slices.SortFunc(out, func(x, y sqsActionUse) int {
		return cmp.Or(cmp.Compare(y.Requests, x.Requests), strings.Compare(x.action, y.action))
	})
	return out
}
