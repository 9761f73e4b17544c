package mediator

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"strings"
	"time"

	jsonv2 "github.com/go-json-experiment/json"

	"github.com/dispatchhq/dispatch/handoff"
)

// Take asks the processing endpoint's API for the pointers of jobs it has
// just created, up to req.Room per pool, waiting up to req.WaitSeconds for
// the first (the router's side of handoff). It returns
// handoff.ErrNotOffered when the API offers this router none: 404 (an
// older version), 409 (the router consumes none of the queue the API's
// new jobs are bound for; the API's message says which) or 400.
//
// The wait ends with ctx, but an answer that has begun to come is read
// whole even so: the API counts its jobs as the router's once it has
// written it, and a stopping router gives back what it holds, where an
// answer dropped half-read would leave its jobs to the outbox's sweep.
func (h *HTTP) Take(ctx context.Context, req handoff.Request) ([]handoff.Offer, error) {
	reqCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	stopWaiting := context.AfterFunc(ctx, cancel)
	// The answer's first byte decides: ctx ends the request until then, and
	// not after. Stopped only once Do returned, ctx ending in between (the
	// headers in, Do not yet back) cancelled an answer already begun.
	reqCtx = httptrace.WithClientTrace(reqCtx, &httptrace.ClientTrace{GotFirstResponseByte: func() { stopWaiting() }})
	resp, err := h.post(reqCtx, "/offers", req)
	stopWaiting()
	if err != nil {
		return nil, fmt.Errorf("take offered jobs: %w", err)
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
	case http.StatusNotFound, http.StatusMethodNotAllowed:
		return nil, handoff.ErrNotOffered
	case http.StatusConflict, http.StatusBadRequest:
		// 409: the router consumes none of the API's queue; 400: the API
		// refuses the request (another version's rules). Either way asking
		// again at once would get the same answer.
		return nil, fmt.Errorf("%w: the API answered %d: %s", handoff.ErrNotOffered, resp.StatusCode, errorMessage(resp.Body))
	case http.StatusUnauthorized, http.StatusForbidden:
		return nil, fmt.Errorf("take offered jobs: %w", ErrUnauthorized)
	default:
		return nil, fmt.Errorf("take offered jobs: the API answered %d", resp.StatusCode)
	}
	var a handoff.Answer
	if err := jsonv2.UnmarshalRead(io.LimitReader(resp.Body, 4<<20), &a); err != nil {
		return nil, fmt.Errorf("take offered jobs: the API's answer: %w", err)
	}
	return a.Offers, nil
}

// GiveBack has the API put an offered job on the queue after all, to be
// mediated no sooner than after.
func (h *HTTP) GiveBack(ctx context.Context, hd handoff.Handle, after time.Duration) error {
	secs := int((after + time.Second - 1) / time.Second)
	resp, err := h.post(ctx, "/offers/give-back", handoff.GiveBack{Handle: hd, AfterSeconds: secs})
	if err != nil {
		return fmt.Errorf("give back job %d: %w", hd.ID, err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode != http.StatusNoContent {
		return fmt.Errorf("give back job %d: the API answered %d", hd.ID, resp.StatusCode)
	}
	return nil
}

// post sends v as JSON to path under the processing URL.
func (h *HTTP) post(ctx context.Context, path string, v any) (*http.Response, error) {
	req, err := h.newRequest(ctx, strings.TrimSuffix(h.url, "/")+path, v)
	if err != nil {
		return nil, err
	}
	return h.client.Do(req)
}

// newRequest is a POST of v as JSON to url, with the internal token.
func (h *HTTP) newRequest(ctx context.Context, url string, v any) (*http.Request, error) {
	body, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	if h.token != "" {
		req.Header.Set("Authorization", "Bearer "+h.token)
	}
	return req, nil
}

// errorMessage is the message of the API's error answer in body, or "" when
// body is not one.
func errorMessage(body io.Reader) string {
	var e struct {
		Error struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	_ = jsonv2.UnmarshalRead(io.LimitReader(body, 64<<10), &e)
	return e.Error.Message
}
