package app

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/dispatchhq/dispatch"
	"github.com/dispatchhq/dispatch/mediator"
)

// localBreakers are this process's circuit breakers, for the router of
// `dispatch all`, which delivers through the processor in process.
type localBreakers struct{ b *mediator.Breakers }

func (l localBreakers) States(context.Context) ([]dispatch.BreakerState, error) {
	return l.b.States(), nil
}
func (l localBreakers) Reset(_ context.Context, host string) (bool, error) {
	return l.b.Reset(host), nil
}

// remoteBreakers are the circuit breakers of the API that the router's
// processing URL reaches (a router alone: the API delivers, so the
// breakers are there), read and reset with the internal token.
type remoteBreakers struct {
	base, token string
	client      *http.Client
}

func newRemoteBreakers(processURL, token string) remoteBreakers {
	return remoteBreakers{base: strings.TrimSuffix(processURL, "/") + "/circuit-breakers", token: token,
		client: &http.Client{Timeout: 5 * time.Second}}
}

func (r remoteBreakers) do(ctx context.Context, method, url string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, url, nil)
	if err != nil {
		return nil, err
	}
	if r.token != "" {
		req.Header.Set("Authorization", "Bearer "+r.token)
	}
	return r.client.Do(req)
}

func (r remoteBreakers) States(ctx context.Context) ([]dispatch.BreakerState, error) {
	resp, err := r.do(ctx, http.MethodGet, r.base)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("the API answered %s", resp.Status)
	}
	var got []struct {
		Host                string     `json:"host"`
		State               string     `json:"state"`
		ConsecutiveFailures int        `json:"consecutiveFailures"`
		OpenUntil           *time.Time `json:"openUntil"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 4<<20)).Decode(&got); err != nil {
		return nil, fmt.Errorf("the API's answer: %w", err)
	}
	out := make([]dispatch.BreakerState, len(got))
	for i, b := range got {
		out[i] = dispatch.BreakerState{Host: b.Host, State: b.State, ConsecutiveFailures: b.ConsecutiveFailures, OpenUntil: b.OpenUntil}
	}
	return out, nil
}

func (r remoteBreakers) Reset(ctx context.Context, host string) (bool, error) {
	resp, err := r.do(ctx, http.MethodPost, r.base+"/"+url.PathEscape(host)+"/reset")
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
		return true, nil
	case http.StatusNotFound:
		return false, nil
	}
	return false, fmt.Errorf("the API answered %s", resp.Status)
}
