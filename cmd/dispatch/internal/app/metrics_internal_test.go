package app

import (
	"context"
	"errors"
	"io"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dispatchhq/dispatch"
	"github.com/dispatchhq/dispatch/router/queue"
)

// With the database down /metrics still answers, saying so
// (dispatch_backlog_up{source="database"} 0) beside the series that do not
// need it: the backlog alerts fire exactly then. Before, the storage
// figures' failed read turned the whole scrape into a 500. And a database
// read that takes all its time leaves the queue's read its own.
func TestMetricsAnswerWithTheDatabaseDown(t *testing.T) {
	down := errors.New("connection refused")
	slowDown := func(ctx context.Context, _ time.Time) (dispatch.Backlog, error) {
		<-ctx.Done() // a database that does not answer
		return dispatch.Backlog{}, ctx.Err()
	}
	depth := func(ctx context.Context) (queue.Depth, error) {
		if err := ctx.Err(); err != nil {
			return queue.Depth{}, err
		}
		return queue.Depth{Visible: 7}, nil
	}
	reg := prometheus.NewRegistry()
	backlog := newBacklogCollector(slowDown, depth)
	backlog.timeout = 50 * time.Millisecond
	reg.MustRegister(backlog, newStorageCollector(func(context.Context) (dispatch.Storage, error) { return dispatch.Storage{}, down }))
	reg.MustRegister(prometheus.NewCounter(prometheus.CounterOpts{Name: "dispatch_deliveries_example_total", Help: "a series that needs no database"}))

	rec := httptest.NewRecorder()
	metricsHandler(reg).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	if rec.Code != 200 {
		t.Fatalf("/metrics answered %d with the database down: %s", rec.Code, body)
	}
	for _, want := range []string{
		`dispatch_backlog_up{source="database"} 0`,
		`dispatch_backlog_up{source="queue"} 1`,
		`dispatch_queue_messages{state="visible"} 7`,
		`dispatch_deliveries_example_total 0`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %q:\n%s", want, body)
		}
	}
	if strings.Contains(string(body), "dispatch_database_bytes") {
		t.Errorf("/metrics shows the database's size though it could not be read:\n%s", body)
	}
}
