package decode

import (
	"slices"
	"strings"
	"testing"

	"github.com/dispatchhq/dispatch"
)

// seedQueue is seed 002's queueUrl.
const seedQueue = "http://localhost:9324/000000000000/flow-catalyst-dispatch.fifo"

func routed() dispatch.JobRules {
	return dispatch.JobRules{Routing: dispatch.NewRouting([]dispatch.RouteQueue{
		{Key: seedQueue, Name: "flow-catalyst-dispatch.fifo"},
		{Key: "slow-partner.fifo", Name: "slow-partner.fifo", ByName: true},
	}, []string{"DISPATCH-POOL", "SLOW"})}
}

// A job names one of the configured queues (by its URL, by its name, or, for
// a queue configured by name, by any URL ending in it) and pools; what it
// stores is the queue's key.
func TestParseCreateJobNamesItsQueueAndPool(t *testing.T) {
	tests := []struct {
		queueURL, poolCode string
		wantQueue          string
	}{
		{seedQueue, "", seedQueue},
		{"flow-catalyst-dispatch.fifo", "SLOW", seedQueue},
		{"https://sqs.eu-west-1.amazonaws.com/123456789012/slow-partner.fifo", "SLOW", "slow-partner.fifo"},
		{"slow-partner.fifo", "DISPATCH-POOL", "slow-partner.fifo"},
	}
	for _, tt := range tests {
		set := map[string]any{"queueUrl": tt.queueURL}
		if tt.poolCode != "" {
			set["poolCode"] = tt.poolCode
		}
		j, err := CreateJob(jobBody(t, set), routed(), testNow)
		if err != nil {
			t.Fatalf("queueUrl %q, poolCode %q: %v", tt.queueURL, tt.poolCode, err)
		}
		if j.QueueURL != tt.wantQueue || j.PoolCode != tt.poolCode {
			t.Errorf("queueUrl %q, poolCode %q: job names queue %q, pool %q; want %q, %q", tt.queueURL, tt.poolCode, j.QueueURL, j.PoolCode, tt.wantQueue, tt.poolCode)
		}
	}
	j, err := CreateJob(jobBody(t, nil), routed(), testNow)
	if err != nil || j.QueueURL != "" || j.PoolCode != "" {
		t.Errorf("a job naming neither: %+v, %v; want the defaults (empty)", j, err)
	}
}

// A queue or pool the deployment does not have is refused, naming those it
// has.
func TestParseCreateJobRefusesAnUnknownQueueOrPool(t *testing.T) {
	tests := []struct {
		name  string
		set   map[string]any
		rules dispatch.JobRules
		want  []string
	}{
		{"another account's queue of the same name", map[string]any{"queueUrl": "https://sqs.eu-west-1.amazonaws.com/1/flow-catalyst-dispatch.fifo"}, routed(),
			[]string{"queueUrl", "must be one of the configured queues: " + seedQueue + ", slow-partner.fifo"}},
		{"an unknown queue", map[string]any{"queueUrl": "other.fifo"}, routed(), []string{"queueUrl"}},
		{"an empty queue", map[string]any{"queueUrl": ""}, routed(), []string{"queueUrl"}},
		{"a queue when none is configured", map[string]any{"queueUrl": seedQueue}, strict, []string{"queueUrl", "none is configured"}},
		{"an unknown pool", map[string]any{"poolCode": "FAST"}, routed(), []string{"poolCode", "must be one of the configured pools: DISPATCH-POOL, SLOW"}},
		{"a pool when none is configured", map[string]any{"poolCode": "SLOW"}, strict, []string{"poolCode", "DISPATCH-POOL"}},
		{"a pool code not a string", map[string]any{"poolCode": 5}, routed(), []string{"poolCode"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := CreateJob(jobBody(t, tt.set), tt.rules, testNow)
			if err == nil {
				t.Fatal("accepted")
			}
			fields := problemFields(t, err)
			if !slices.Contains(fields, tt.want[0]) || len(fields) != 1 {
				t.Errorf("problems %v, want one with %s", fields, tt.want[0])
			}
			for _, w := range tt.want[1:] {
				if !strings.Contains(err.(*dispatch.Error).Details[0].Message, w) {
					t.Errorf("%q does not say %q", err.(*dispatch.Error).Details[0].Message, w)
				}
			}
		})
	}
}

// A subscription names the queue and pool of its jobs; a patch changes or
// clears them.
func TestSubscriptionNamesItsJobsQueueAndPool(t *testing.T) {
	body := `{"name": "n", "url": "https://partner.example/hook", "eventTypes": ["*"], "queueUrl": "slow-partner.fifo", "poolCode": "SLOW"}`
	sub, _, err := Subscription([]byte(body), routed())
	if err != nil {
		t.Fatal(err)
	}
	if sub.QueueURL != "slow-partner.fifo" || sub.PoolCode != "SLOW" {
		t.Errorf("subscription %+v", sub)
	}
	if err := PatchSubscription([]byte(`{"queueUrl": null, "poolCode": "DISPATCH-POOL"}`), routed(), sub); err != nil {
		t.Fatal(err)
	}
	if sub.QueueURL != "" || sub.PoolCode != "DISPATCH-POOL" {
		t.Errorf("patched: %+v", sub)
	}
	err = PatchSubscription([]byte(`{"queueUrl": "nope.fifo", "poolCode": "NOPE"}`), routed(), sub)
	if fields := problemFields(t, err); !slices.Equal(fields, []string{"poolCode", "queueUrl"}) && !slices.Equal(fields, []string{"queueUrl", "poolCode"}) {
		t.Errorf("problems %v, want queueUrl and poolCode", fields)
	}
}
