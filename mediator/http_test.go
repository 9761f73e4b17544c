package mediator_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/dispatchhq/dispatch"
	"github.com/dispatchhq/dispatch/handoff"
	"github.com/dispatchhq/dispatch/mediator"
)

func TestHTTPMediate(t *testing.T) {
	tests := []struct {
		name  string
		code  int
		body  string
		check func(error) bool
	}{
		{"200 with the processing answer is done", 200, `{"status":"done","jobStatus":"COMPLETED"}`, func(err error) bool { return err == nil }},
		// Something else at the URL (a gateway answering any POST): the
		// outcome is not known to be recorded, so the message is kept.
		{"200 without a processing answer", 200, `ok`, func(err error) bool {
			var ra *dispatch.RetryAfter
			return err != nil && !errors.As(err, &ra) && strings.Contains(err.Error(), "DISPATCH_PROCESS_URL")
		}},
		{"400 with retryAfterSeconds", 400, `{"status":"retry","retryAfterSeconds":42,"reason":"HTTP 500"}`, func(err error) bool {
			var ra *dispatch.RetryAfter
			return errors.As(err, &ra) && ra.Delay == 42*time.Second && ra.Reason == "HTTP 500"
		}},
		{"400 with zero retryAfterSeconds", 400, `{"retryAfterSeconds":0}`, func(err error) bool {
			var ra *dispatch.RetryAfter
			return errors.As(err, &ra) && ra.Delay == 0
		}},
		{"400 without retryAfterSeconds", 400, `{"error":{"code":"invalid_request"}}`, func(err error) bool {
			var ra *dispatch.RetryAfter
			return err != nil && !errors.As(err, &ra)
		}},
		{"401", 401, ``, func(err error) bool { return errors.Is(err, mediator.ErrUnauthorized) }},
		{"403", 403, ``, func(err error) bool { return errors.Is(err, mediator.ErrUnauthorized) }},
		{"500", 500, `not json`, func(err error) bool {
			var ra *dispatch.RetryAfter
			return err != nil && !errors.As(err, &ra) && !errors.Is(err, mediator.ErrUnauthorized)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tg := newTarget(t, func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(tt.code)
				io.WriteString(w, tt.body)
			})
			m := mediator.NewHTTP(tg.URL+"/api/dispatch/process", "internal-token", 5*time.Second)
			ptr := dispatch.Pointer{ID: "123", PoolCode: "DISPATCH-POOL", MediationType: "HTTP",
				MediationTarget: "http://127.0.0.2:1/elsewhere", MessageGroupID: "g"}
			err := m.Mediate(context.Background(), ptr)
			if !tt.check(err) {
				t.Errorf("Mediate = %v", err)
			}
			r := tg.next(t)
			if r.header.Get("Authorization") != "Bearer internal-token" || r.header.Get("Content-Type") != "application/json" {
				t.Errorf("headers %v", r.header)
			}
			var got dispatch.Pointer
			if err := json.Unmarshal(r.body, &got); err != nil || got != ptr {
				t.Errorf("processing endpoint got %s (%v), want the pointer", r.body, err)
			}
		})
	}
}

func TestHTTPMediateUnreachable(t *testing.T) {
	tg := statusTarget(t, 200)
	url := tg.URL
	tg.Close()
	err := mediator.NewHTTP(url, "", time.Second).Mediate(context.Background(), dispatch.Pointer{ID: "1"})
	var ra *dispatch.RetryAfter
	if err == nil || errors.As(err, &ra) {
		t.Errorf("Mediate to a closed endpoint = %v; want a plain error for the router's backoff", err)
	}
}

// A processing request says when its message is the queue's first
// receive of it, and carries an offered job's handle, so that the
// processing endpoint can claim a job its store handed over in memory.
func TestHTTPMediateSaysWhatProvesAFirstCopy(t *testing.T) {
	tg := newTarget(t, func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, `{"status":"done"}`) })
	m := mediator.NewHTTP(tg.URL, "internal-token", 5*time.Second)
	h := handoff.Handle{ID: 9, Mark: time.Date(2026, 1, 2, 3, 4, 5, 6000, time.UTC)}
	for _, c := range []struct {
		ctx         context.Context
		first, offr bool
	}{
		{context.Background(), false, false},
		{handoff.WithFirstReceive(context.Background()), true, false},
		{handoff.WithHandle(context.Background(), h), false, true},
	} {
		if err := m.Mediate(c.ctx, dispatch.Pointer{ID: "9"}); err != nil {
			t.Fatal(err)
		}
		r := tg.next(t)
		if got := r.header.Get(handoff.FirstReceiveHeader) == "1"; got != c.first {
			t.Errorf("first receive said %v, want %v", got, c.first)
		}
		got, err := handoff.DecodeHeader(r.header.Get(handoff.Header))
		if (err == nil) != c.offr || c.offr && (got.ID != h.ID || !got.Mark.Equal(h.Mark)) {
			t.Errorf("offer handle %+v (%v), want it: %v", got, err, c.offr)
		}
	}
}
