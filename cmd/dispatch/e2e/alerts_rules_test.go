package e2e

import (
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
)

// The alert rules shipped in docs/ load in Prometheus (its own rule
// parser checks the file, every expression and every template), each
// says how bad and what to do, and every metric they name is one that
// `dispatch all` serves: a renamed metric cannot leave a rule that never
// fires.
func TestAlertRulesLoadAndNameServedMetrics(t *testing.T) {
	t.Parallel()
	p := parser.NewParser(parser.Options{})
	groups, errs := rulefmt.ParseFile("../../../docs/alerts.rules.yml", false, model.UTF8Validation, p, slog.New(slog.DiscardHandler))
	for _, err := range errs {
		t.Errorf("docs/alerts.rules.yml: %v", err)
	}
	if t.Failed() {
		return
	}
	used := map[string][]string{} // metric → the alerts that use it
	alerts := 0
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			alerts++
			if r.Labels["severity"] == "" || r.Annotations["summary"] == "" || r.Annotations["description"] == "" {
				t.Errorf("alert %s: want a severity label and summary and description annotations", r.Alert)
			}
			expr, err := p.ParseExpr(r.Expr)
			if err != nil {
				t.Fatalf("alert %s: %v", r.Alert, err) // ParseFile checked it already
			}
			parser.Inspect(expr, func(n parser.Node, _ []parser.Node) error {
				if vs, ok := n.(*parser.VectorSelector); ok {
					used[vs.Name] = append(used[vs.Name], r.Alert)
				}
				return nil
			})
		}
	}
	for _, name := range []string{"DispatchFallingBehind", "DispatchTargetFailing", "DispatchRetriesExhausted"} {
		found := false
		for _, g := range groups.Groups {
			for _, r := range g.Rules {
				found = found || r.Alert == name
			}
		}
		if !found {
			t.Errorf("no alert %s", name)
		}
	}

	// One delivery, so that the series that appear with their first
	// observation exist too.
	in := start(t, "all", nil)
	rc := newReceiver(t, nil)
	j := in.createJob(jobBody(rc.URL, nil))
	in.waitStatus(j.ID, 30*time.Second, "COMPLETED")
	if code := in.do(http.MethodGet, "/api/dispatch/jobs/"+j.ID, apiToken, nil, nil); code != http.StatusOK {
		t.Fatalf("get job: %d", code)
	}
	fams := scrape(t, in.apiURL)
	for name, by := range used {
		family := name
		for _, suffix := range []string{"_bucket", "_count", "_sum"} {
			if base, ok := strings.CutSuffix(name, suffix); ok && fams[base] != nil {
				family = base
			}
		}
		if fams[family] == nil {
			t.Errorf("%s (used by %v) is not served on /metrics", name, by)
		}
	}
	t.Logf("%d alerts over %d metrics", alerts, len(used))
}
