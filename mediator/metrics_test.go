package mediator_test

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dispatchhq/dispatch"
	"github.com/dispatchhq/dispatch/mediator"
)

// value reads a counter, or a histogram's count, from reg (the series
// with the given label pairs).
func value(t *testing.T, reg *prometheus.Registry, name string, labels ...string) float64 {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
	next:
		for _, m := range f.GetMetric() {
			have := map[string]string{}
			for _, l := range m.GetLabel() {
				have[l.GetName()] = l.GetValue()
			}
			for i := 0; i+1 < len(labels); i += 2 {
				if have[labels[i]] != labels[i+1] {
					continue next
				}
			}
			if h := m.GetHistogram(); h != nil {
				return float64(h.GetSampleCount())
			}
			return m.GetCounter().GetValue()
		}
	}
	return 0
}

// A completed job's creation-to-delivery time is observed once; a job
// whose retries run out is counted as exhausted, one that a 4xx ends is
// not; retries in between count nothing.
func TestMetricsCountFinishedJobs(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	s := setupProcessor(t, mediator.ProcessorConfig{Metrics: mediator.NewMetrics(reg)})
	ok, failing, gone := statusTarget(t, 200), statusTarget(t, 503), statusTarget(t, 410)

	done := s.createJob(t, ok.URL, nil)
	s.process(t, done.ID)
	exhausted := s.createJob(t, failing.URL, func(j *dispatch.Job) { j.MaxRetries = 2 })
	if d := s.process(t, exhausted.ID); d.Done {
		t.Fatalf("first of two attempts: decision %+v, want a retry", d)
	}
	if n := value(t, reg, "dispatch_jobs_finished_total", "status", "ERROR"); n != 0 {
		t.Errorf("a job waiting for its retry counted as finished: %g", n)
	}
	if _, err := s.pool.Exec(t.Context(), `UPDATE dispatch_job SET next_attempt_at = now() WHERE id = $1`, exhausted.ID); err != nil {
		t.Fatal(err)
	}
	s.process(t, exhausted.ID)
	rejected := s.createJob(t, gone.URL, nil)
	s.process(t, rejected.ID)

	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"dispatch_job_delivery_latency_seconds", nil, 1},
		{"dispatch_jobs_finished_total", []string{"status", "COMPLETED"}, 1},
		{"dispatch_jobs_finished_total", []string{"status", "ERROR"}, 2},
		{"dispatch_jobs_retries_exhausted_total", nil, 1},
	} {
		if got := value(t, reg, c.name, c.labels...); got != c.want {
			t.Errorf("%s%v = %g, want %g", c.name, c.labels, got, c.want)
		}
	}
	if j := s.job(t, exhausted.ID); j.Status != dispatch.StatusError {
		t.Errorf("the failing job is %s, want ERROR", j.Status)
	}
}
