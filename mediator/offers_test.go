package mediator_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/dispatchhq/dispatch/handoff"
	"github.com/dispatchhq/dispatch/mediator"
)

var offerRequest = handoff.Request{Room: map[string]int{"DISPATCH-POOL": 2}, Queues: []string{"jobs.fifo"}, WaitSeconds: 20}

const oneOffer = `{"offers": [{"pointer": {"id": "7", "poolCode": "DISPATCH-POOL"}, "handle": {"id": "7", "mark": "2026-11-28T12:00:00Z"}}]}`

// The API's answers to a request for new jobs, as the router reads them:
// the jobs; "offers none" (ask again later, not at once) for an older API,
// one whose queue the router does not consume, and one refusing the
// request, with the API's reason; a refused token.
func TestTakeReadsTheAPIsAnswers(t *testing.T) {
	tests := []struct {
		name  string
		code  int
		body  string
		check func([]handoff.Offer, error) bool
	}{
		{"200 with a job", 200, oneOffer, func(o []handoff.Offer, err error) bool {
			return err == nil && len(o) == 1 && o[0].Pointer.ID == "7" && o[0].Handle.ID == 7
		}},
		{"200 with none", 200, `{"offers": []}`, func(o []handoff.Offer, err error) bool { return err == nil && len(o) == 0 }},
		{"404: an older API", 404, ``, func(_ []handoff.Offer, err error) bool { return errors.Is(err, handoff.ErrNotOffered) }},
		{"409: another queue", 409, `{"error": {"code": "conflict", "message": "this API offers jobs bound for queue jobs.fifo only"}}`,
			func(_ []handoff.Offer, err error) bool {
				return errors.Is(err, handoff.ErrNotOffered) && strings.Contains(err.Error(), "bound for queue jobs.fifo")
			}},
		{"400: refused", 400, `{"error": {"code": "invalid_request", "message": "invalid request"}}`,
			func(_ []handoff.Offer, err error) bool {
				return errors.Is(err, handoff.ErrNotOffered) && strings.Contains(err.Error(), "400")
			}},
		{"401", 401, ``, func(_ []handoff.Offer, err error) bool { return errors.Is(err, mediator.ErrUnauthorized) }},
		{"500", 500, `oops`, func(_ []handoff.Offer, err error) bool {
			return err != nil && !errors.Is(err, handoff.ErrNotOffered) && !errors.Is(err, mediator.ErrUnauthorized)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			paths := make(chan string, 1)
			tg := newTarget(t, func(w http.ResponseWriter, r *http.Request) {
				paths <- r.URL.Path
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(tt.code)
				io.WriteString(w, tt.body)
			})
			m := mediator.NewHTTP(tg.URL+"/api/dispatch/process", "internal-token", 5*time.Second)
			offers, err := m.Take(context.Background(), offerRequest)
			if !tt.check(offers, err) {
				t.Errorf("Take = %+v, %v", offers, err)
			}
			r := tg.next(t)
			if path := <-paths; path != "/api/dispatch/process/offers" || r.header.Get("Authorization") != "Bearer internal-token" {
				t.Errorf("request to %s with headers %v", path, r.header)
			}
		})
	}
}

// A router that stops while its request still waits ends the request at
// once; one that stops after the API has begun to answer reads the answer
// whole, so that it takes the jobs (and gives them back as it stops)
// instead of dropping what the API has handed over.
func TestTakeEndsAWaitWithItsContextButKeepsAnAnswerBegun(t *testing.T) {
	t.Run("waiting", func(t *testing.T) {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			// A long poll with nothing to offer, which reads the request
			// first, as the API does: net/http notices a client gone only
			// once the request's body is read, so a handler that never
			// read it waited past the client's close, and srv.Close with it.
			_, _ = io.Copy(io.Discard, r.Body)
			<-r.Context().Done()
		}))
		defer srv.Close()
		m := mediator.NewHTTP(srv.URL+"/api/dispatch/process", "", 30*time.Second)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { _, err := m.Take(ctx, offerRequest); done <- err }()
		cancel()
		select {
		case err := <-done:
			if err == nil {
				t.Error("a cancelled wait returned no error")
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the wait went on after its context ended")
		}
	})

	t.Run("answer begun", func(t *testing.T) {
		headers, body := make(chan struct{}), make(chan struct{})
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusOK)
			w.(http.Flusher).Flush()
			<-body
			io.WriteString(w, oneOffer)
		}))
		defer srv.Close()
		m := mediator.NewHTTP(srv.URL+"/api/dispatch/process", "", 30*time.Second)
		// Close headers once the client has read the answer's headers.
		mediator.WrapTransport(m, func(rt http.RoundTripper) http.RoundTripper {
			return roundTripFunc(func(r *http.Request) (*http.Response, error) {
				resp, err := rt.RoundTrip(r)
				close(headers)
				return resp, err
			})
		})
		ctx, cancel := context.WithCancel(context.Background())
		type result struct {
			offers []handoff.Offer
			err    error
		}
		done := make(chan result, 1)
		go func() { o, err := m.Take(ctx, offerRequest); done <- result{o, err} }()
		<-headers
		cancel() // the router stops, the answer's body still on its way
		close(body)
		select {
		case r := <-done:
			if r.err != nil || len(r.offers) != 1 || r.offers[0].Pointer.ID != "7" {
				t.Errorf("Take = %+v, %v; want job 7: the API handed it over", r.offers, r.err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("Take did not return")
		}
	})
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
