package e2e

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// scrape reads url's /metrics: the families, or nil when it answers
// anything but 200.
func scrape(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatalf("scrape %s: %v", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("scrape %s: %v", url, err)
	}
	return fams
}

// sample finds the series of name whose labels include the given pairs
// ("code", "404", …) and returns its value (a histogram's: its count), and
// whether there is one.
func sample(fams map[string]*dto.MetricFamily, name string, labels ...string) (float64, bool) {
	f := fams[name]
	if f == nil {
		return 0, false
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
		switch {
		case m.GetGauge() != nil:
			return m.GetGauge().GetValue(), true
		case m.GetCounter() != nil:
			return m.GetCounter().GetValue(), true
		case m.GetHistogram() != nil:
			return float64(m.GetHistogram().GetSampleCount()), true
		}
	}
	return 0, false
}

// describe lists the dispatch_* series that say how far behind delivery
// is, for failure messages.
func describe(fams map[string]*dto.MetricFamily) string {
	var b strings.Builder
	for _, name := range []string{"dispatch_live_jobs", "dispatch_unsent_jobs", "dispatch_oldest_pending_job_age_seconds",
		"dispatch_queue_messages", "dispatch_backlog_up", "dispatch_job_delivery_latency_seconds"} {
		f := fams[name]
		if f == nil {
			fmt.Fprintf(&b, "%s: none; ", name)
			continue
		}
		for _, m := range f.GetMetric() {
			fmt.Fprintf(&b, "%s%v ", name, m.GetLabel())
			switch {
			case m.GetGauge() != nil:
				fmt.Fprintf(&b, "%g; ", m.GetGauge().GetValue())
			case m.GetHistogram() != nil:
				fmt.Fprintf(&b, "count %d; ", m.GetHistogram().GetSampleCount())
			}
		}
	}
	return b.String()
}

// While no router runs, jobs pile up: /metrics counts them PENDING, on the
// queue and waiting longer and longer; scheduled jobs count as pending but
// not as waiting. A router started then drains them, and the API's
// /metrics shows the backlog gone and every delivery's latency.
func TestMetricsShowTheBacklogBuildAndDrain(t *testing.T) {
	t.Parallel()
	api := start(t, "api", nil)
	rc := newReceiver(t, nil)
	const due, scheduled = 12, 3
	for range due {
		api.createJob(jobBody(rc.URL, nil))
	}
	later := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	for range scheduled {
		api.createJob(jobBody(rc.URL, map[string]any{"scheduledFor": later}))
	}
	var fams map[string]*dto.MetricFamily
	var age float64
	eventually(t, 20*time.Second, func() bool {
		fams = scrape(t, api.apiURL)
		pending, _ := sample(fams, "dispatch_live_jobs", "status", "PENDING")
		visible, _ := sample(fams, "dispatch_queue_messages", "state", "visible")
		unsent, _ := sample(fams, "dispatch_unsent_jobs")
		age, _ = sample(fams, "dispatch_oldest_pending_job_age_seconds")
		return pending == due+scheduled && visible == due && unsent == 0 && age > 0
	}, func() string { return describe(fams) })
	for _, source := range []string{"database", "queue"} {
		if up, _ := sample(fams, "dispatch_backlog_up", "source", source); up != 1 {
			t.Errorf("dispatch_backlog_up{source=%q} = %g, want 1", source, up)
		}
	}
	// The oldest job keeps waiting: its age grows from one scrape to the next.
	eventually(t, 10*time.Second, func() bool {
		later, _ := sample(scrape(t, api.apiURL), "dispatch_oldest_pending_job_age_seconds")
		return later > age
	}, func() string { return "the oldest pending job's age did not grow" })

	// HTTP metrics: numeric codes and a latency histogram, per route.
	if code := api.do("GET", "/api/dispatch/no-such-route", apiToken, nil, nil); code != http.StatusNotFound {
		t.Fatalf("unknown route: %d", code)
	}
	fams = scrape(t, api.apiURL)
	if n, _ := sample(fams, "dispatch_http_requests_total", "method", "POST", "route", "/api/dispatch/jobs", "code", "201"); n != due+scheduled {
		t.Errorf("dispatch_http_requests_total{route=/api/dispatch/jobs, code=201} = %g, want %d", n, due+scheduled)
	}
	if n, _ := sample(fams, "dispatch_http_requests_total", "route", "unmatched", "code", "404"); n != 1 {
		t.Errorf("dispatch_http_requests_total{route=unmatched, code=404} = %g, want 1", n)
	}
	if n, _ := sample(fams, "dispatch_http_request_duration_seconds", "method", "POST", "route", "/api/dispatch/jobs"); n != due+scheduled {
		t.Errorf("dispatch_http_request_duration_seconds{route=/api/dispatch/jobs} count = %g, want %d", n, due+scheduled)
	}

	// A router drains the due jobs.
	rt := startWith(t, "router", api.dbURL, api.queue, map[string]string{"DISPATCH_PROCESS_URL": api.apiURL + "/api/dispatch/process"})
	eventually(t, 30*time.Second, func() bool {
		fams = scrape(t, api.apiURL)
		pending, _ := sample(fams, "dispatch_live_jobs", "status", "PENDING")
		delivered, _ := sample(fams, "dispatch_job_delivery_latency_seconds")
		age, _ := sample(fams, "dispatch_oldest_pending_job_age_seconds")
		return pending == scheduled && delivered == due && age == 0
	}, func() string { return describe(fams) })
	if rc.count() != due {
		t.Errorf("the receiver got %d requests, want %d", rc.count(), due)
	}
	// The router alone has no database: its /metrics has the pools and the
	// queue, not the jobs.
	fams = scrape(t, rt.routerURL)
	if _, ok := sample(fams, "dispatch_router_concurrency", "pool", "DISPATCH-POOL"); !ok {
		t.Errorf("the router's /metrics has no dispatch_router_concurrency: %s", describe(fams))
	}
	if _, ok := sample(fams, "dispatch_queue_messages", "state", "visible"); !ok {
		t.Errorf("the router's /metrics has no queue depth: %s", describe(fams))
	}
	if _, ok := sample(fams, "dispatch_live_jobs", "status", "PENDING"); ok {
		t.Errorf("the router's /metrics has dispatch_live_jobs, which it cannot read")
	}
}

// In `dispatch all` the one registry is served once, on the API's
// listener: the router's listener has no /metrics to double-count.
func TestMetricsServedOnceInAll(t *testing.T) {
	t.Parallel()
	in := start(t, "all", nil)
	fams := scrape(t, in.apiURL)
	for _, name := range []string{"dispatch_router_in_flight", "dispatch_router_buffered", "dispatch_live_jobs", "dispatch_queue_messages"} {
		if fams[name] == nil {
			t.Errorf("the API's /metrics has no %s", name)
		}
	}
	resp, err := http.Get(in.routerURL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("the router's listener answers /metrics with %d in `all`, want 404", resp.StatusCode)
	}
	resp, err = http.Get(in.routerURL + "/monitoring/pools")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("the router's /monitoring/pools answers %d", resp.StatusCode)
	}
}
