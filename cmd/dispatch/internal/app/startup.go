package app

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/dispatchhq/dispatch"
	"github.com/dispatchhq/dispatch/store"
)

// startup is what a starting process waits for. Until the API and the
// router serve, its handler answers on their ports: /health/live says the
// process is alive (an orchestrator must not kill a process that waits for
// its database), /health/ready says what it waits for and why, and every
// other path answers 503.
type startup struct {
	mu         sync.Mutex
	waitingFor string // "database", "migrations"
	reason     string // short: "connection refused", …
	detail     string // the whole story, without secrets
}

func (s *startup) set(waitingFor, reason, detail string) {
	s.mu.Lock()
	s.waitingFor, s.reason, s.detail = waitingFor, reason, detail
	s.mu.Unlock()
}

func (s *startup) state() (waitingFor, reason, detail string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.waitingFor, s.reason, s.detail
}

// reasonOf is the short reason of a failure to reach the database.
func reasonOf(err error) string {
	if ce := (*store.ConnectError)(nil); errors.As(err, &ce) {
		return ce.Reason
	}
	return store.ReasonOther
}

func (s *startup) handler() http.Handler {
	mux := http.NewServeMux()
	writeJSON := func(w http.ResponseWriter, status int, v any) {
		w.Header().Set("Content-Type", "application/json; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(v)
	}
	mux.HandleFunc("GET /health/live", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]any{"status": "UP", "starting": true})
	})
	mux.HandleFunc("GET /health/ready", func(w http.ResponseWriter, _ *http.Request) {
		what, reason, detail := s.state()
		writeJSON(w, http.StatusServiceUnavailable, map[string]any{
			"status": "DOWN", "starting": true, "waitingFor": what, "reason": reason, "detail": detail,
		})
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) {
		what, reason, _ := s.state()
		msg := "dispatch is starting"
		if what != "" {
			msg += ": waiting for the " + what
			if reason != "" {
				msg += " (" + reason + ")"
			}
		}
		w.Header().Set("Retry-After", "5")
		writeJSON(w, http.StatusServiceUnavailable, map[string]any{
			"error": map[string]any{"code": dispatch.EUnavailable, "message": msg},
		})
	})
	return mux
}

// serve answers on each listener with the startup handler until the
// returned stop is called; stop (idempotent) returns once those servers
// are gone.
func (s *startup) serve(listeners ...net.Listener) (stop func()) {
	var wg sync.WaitGroup
	var servers []*http.Server
	for _, ln := range listeners {
		srv := &http.Server{Handler: s.handler(), ReadHeaderTimeout: 5 * time.Second,
			ReadTimeout: 10 * time.Second, IdleTimeout: 10 * time.Second}
		servers = append(servers, srv)
		wg.Go(func() { _ = srv.Serve(ln) })
	}
	return sync.OnceFunc(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		for _, srv := range servers {
			if srv.Shutdown(ctx) != nil {
				_ = srv.Close()
			}
		}
		wg.Wait()
	})
}

// listenerHandoff lets two servers, one after the other, serve one listening
// socket: the startup handler while the process starts, then the API or
// the router. The port is bound (and answers probes) from the first moment,
// and never closes in between.
type listenerHandoff struct {
	ln       net.Listener
	accepted chan accepted
	stop     chan struct{} // closed by Close
	loopDone chan struct{}
	once     sync.Once
}

type accepted struct {
	conn net.Conn
	err  error
}

func newHandoff(ln net.Listener) *listenerHandoff {
	h := &listenerHandoff{ln: ln, accepted: make(chan accepted), stop: make(chan struct{}), loopDone: make(chan struct{})}
	go h.loop()
	return h
}

func (h *listenerHandoff) loop() {
	defer close(h.loopDone)
	for {
		c, err := h.ln.Accept()
		select {
		case h.accepted <- accepted{c, err}:
		case <-h.stop:
			if c != nil {
				_ = c.Close()
			}
			return
		}
		if errors.Is(err, net.ErrClosed) {
			return
		}
	}
}

// Close closes the socket and waits for the accepting goroutine to end.
func (h *listenerHandoff) Close() error {
	var err error
	h.once.Do(func() {
		close(h.stop)
		err = h.ln.Close()
		<-h.loopDone
	})
	return err
}

// phase returns a listener for one server: its Close ends that server's
// turn (final: and closes the socket).
func (h *listenerHandoff) phase(final bool) net.Listener {
	return &phaseListener{h: h, closed: make(chan struct{}), final: final}
}

type phaseListener struct {
	h      *listenerHandoff
	closed chan struct{}
	once   sync.Once
	final  bool
}

func (p *phaseListener) Accept() (net.Conn, error) {
	select {
	case <-p.closed:
		return nil, net.ErrClosed
	default:
	}
	select {
	case a := <-p.h.accepted:
		return a.conn, a.err
	case <-p.closed:
		return nil, net.ErrClosed
	case <-p.h.stop:
		return nil, net.ErrClosed
	}
}

func (p *phaseListener) Close() error {
	p.once.Do(func() { close(p.closed) })
	if p.final {
		return p.h.Close()
	}
	return nil
}

func (p *phaseListener) Addr() net.Addr { return p.h.ln.Addr() }
