package router_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dispatchhq/dispatch"
	"github.com/dispatchhq/dispatch/router"
)

// reporterFunc is a Reporter made of a function.
type reporterFunc func(context.Context, dispatch.RouterReport) error

func (f reporterFunc) ReportRouter(ctx context.Context, r dispatch.RouterReport) error {
	return f(ctx, r)
}

// A router reports its pools at once, keeps reporting while a report
// fails, and says it stopped when its context ends.
func TestRouterReportsItsPoolsAndItsStop(t *testing.T) {
	t.Parallel()
	b := setup(t, 3, func(dispatch.Pointer, int) error { return nil })
	var (
		mu      sync.Mutex
		reports []dispatch.RouterReport
	)
	got := make(chan struct{}, 10)
	rep := reporterFunc(func(_ context.Context, r dispatch.RouterReport) error {
		mu.Lock()
		reports = append(reports, r)
		n := len(reports)
		mu.Unlock()
		got <- struct{}{}
		if n == 1 {
			return errors.New("database not reachable") // the next tick tries again
		}
		return nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	id := router.NewReportID("host-a")
	go func() { done <- b.router.RunReports(ctx, rep, id, "host-a", "1.2.3") }()
	for range 2 { // the first at once, the second a tick later
		select {
		case <-got:
		case <-time.After(3 * dispatch.RouterReportEvery):
			t.Fatal("no report")
		}
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("RunReports did not return")
	}
	mu.Lock()
	defer mu.Unlock()
	first, last := reports[0], reports[len(reports)-1]
	var pools []struct {
		Code        string `json:"code"`
		Concurrency int    `json:"concurrency"`
	}
	if err := json.Unmarshal(first.Pools, &pools); err != nil || len(pools) != 1 || pools[0].Code != dispatch.DefaultPool || pools[0].Concurrency != 3 {
		t.Errorf("pools reported: %s (%v), want the one pool of concurrency 3", first.Pools, err)
	}
	if !strings.HasPrefix(first.ID, "host-a:") || first.ID != id || first.Host != "host-a" || first.Version != "1.2.3" || first.StartedAt.IsZero() || first.StoppedAt != nil {
		t.Errorf("first report: %+v", first)
	}
	if last.StoppedAt == nil || last.ID != id || !last.StartedAt.Equal(first.StartedAt) {
		t.Errorf("last report: %+v, want the same router saying it stopped", last)
	}
}
