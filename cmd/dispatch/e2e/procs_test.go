package e2e

import (
	"fmt"
	"testing"
	"time"

	"github.com/dispatchhq/dispatch/router/sqstest"
	"github.com/dispatchhq/dispatch/store/storetest"
)

// An idle process runs on one P (docs/decisions/adaptive-procs.md), and
// says so in /metrics; one started with GOMAXPROCS keeps what it was given.
func TestAnIdleProcessRunsOnOnePUnlessGOMAXPROCSIsSet(t *testing.T) {
	t.Parallel()
	q := sqstest.New(t, 30*time.Second)
	// GOMAXPROCS= (empty) unsets it for the runtime too, should the test's
	// own environment set it.
	adaptive := spawn(t, "all", append(baseEnv(storetest.NewDatabase(t), q, map[string]string{"DISPATCH_LOG_LEVEL": "warn"}), "GOMAXPROCS="))
	pinned := spawn(t, "all", append(baseEnv(storetest.NewDatabase(t), q, map[string]string{"DISPATCH_LOG_LEVEL": "warn"}), "GOMAXPROCS=2"))
	procsOf := func(p *proc) float64 {
		v, ok := sample(scrape(t, p.apiURL), "go_sched_gomaxprocs_threads")
		if !ok {
			t.Fatal("/metrics has no go_sched_gomaxprocs_threads")
		}
		return v
	}
	eventually(t, 30*time.Second, func() bool { return procsOf(adaptive) == 1 },
		func() string { return fmt.Sprintf("the idle process still runs on %v Ps", procsOf(adaptive)) })
	if n := procsOf(pinned); n != 2 {
		t.Errorf("the process started with GOMAXPROCS=2 runs on %v Ps", n)
	}
}
