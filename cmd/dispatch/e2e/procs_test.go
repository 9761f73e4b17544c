package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/dispatchhq/dispatch/router/sqstest"
	"github.com/dispatchhq/dispatch/store/storetest"
)

// An idle process runs on one P (docs/decisions/adaptive-procs.md) and
// says so in /metrics; busy, it has the runtime's default back, and idle
// again, one P. One started with GOMAXPROCS keeps what it was given.
func TestAProcessRunsOnOnePWhileIdleUnlessGOMAXPROCSIsSet(t *testing.T) {
	t.Parallel()
	// Each its own database and queue: neither sees the other's jobs.
	// GOMAXPROCS= (empty) unsets it for the runtime too, should the test's
	// own environment set it.
	quiet := map[string]string{"DISPATCH_LOG_LEVEL": "warn"}
	adaptive := spawn(t, "all", append(baseEnv(storetest.NewDatabase(t), sqstest.New(t, 30*time.Second), quiet), "GOMAXPROCS="))
	pinned := spawn(t, "all", append(baseEnv(storetest.NewDatabase(t), sqstest.New(t, 30*time.Second), quiet), "GOMAXPROCS=2"))
	procsOf := func(p *proc) float64 {
		v, ok := sample(scrape(t, p.apiURL), "go_sched_gomaxprocs_threads")
		if !ok {
			t.Fatal("/metrics has no go_sched_gomaxprocs_threads")
		}
		return v
	}
	eventually(t, 30*time.Second, func() bool { return procsOf(adaptive) == 1 },
		func() string { return fmt.Sprintf("the idle process runs on %v Ps", procsOf(adaptive)) })
	if n := procsOf(pinned); n != 2 {
		t.Errorf("the process started with GOMAXPROCS=2 runs on %v Ps", n)
	}
	if runtime.NumCPU() == 1 {
		return // one CPU: one P is the default too
	}

	// Busy: batches of jobs from four clients until it has its cores,
	// whether it gets half a core (an idle machine) or its goroutines
	// queue for the one P (a machine busy with the rest of the suite).
	rc := newReceiver(t, nil)
	jobs := make([]map[string]any, 100)
	for i := range jobs {
		jobs[i] = jobBody(rc.URL, nil)
	}
	body, _ := json.Marshal(map[string]any{"jobs": jobs})
	stop := make(chan struct{})
	var mu sync.Mutex
	codes := map[int]int{}
	statuses := func() string { mu.Lock(); defer mu.Unlock(); return fmt.Sprint(codes) }
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				req, _ := http.NewRequest("POST", adaptive.apiURL+"/api/dispatch/jobs/batch", bytes.NewReader(body))
				req.Header.Set("Authorization", "Bearer "+apiToken)
				req.Header.Set("Content-Type", "application/json")
				if resp, err := http.DefaultClient.Do(req); err == nil {
					resp.Body.Close()
					mu.Lock()
					codes[resp.StatusCode]++
					mu.Unlock()
				}
			}
		})
	}
	stopLoad := sync.OnceFunc(func() { close(stop); wg.Wait() })
	defer stopLoad() // also when the wait below fails
	eventually(t, 30*time.Second, func() bool { return procsOf(adaptive) > 1 },
		func() string {
			cpu, _ := sample(scrape(t, adaptive.apiURL), "process_cpu_seconds_total")
			return fmt.Sprintf("under load the process still runs on %v Ps (cpu %.2fs, answers %v)", procsOf(adaptive), cpu, statuses())
		})
	stopLoad()
	eventually(t, 60*time.Second, func() bool { return procsOf(adaptive) == 1 },
		func() string { return fmt.Sprintf("idle again, the process runs on %v Ps", procsOf(adaptive)) })
}
