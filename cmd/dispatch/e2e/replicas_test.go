package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/dispatchhq/dispatch/router/sqstest"
	"github.com/dispatchhq/dispatch/store/storetest"
)

// A group's jobs created on two API replicas arrive in the order their
// creates were answered. The replicas have node ids 1023 and 0: within one
// millisecond the second replica's TSIDs sort before the first's, so an
// order taken from the ids puts "second" first in the groups whose two
// creates fell in one millisecond.
func TestGroupOrderAcrossTwoAPIReplicas(t *testing.T) {
	t.Parallel()
	dbURL := storetest.NewDatabase(t)
	q := sqstest.New(t, 30*time.Second)
	type delivery struct{ Group, Step string }
	var (
		mu  sync.Mutex
		got = map[string][]string{}
	)
	rc := newReceiver(t, func(_ int, _ *http.Request, body []byte) int {
		var d delivery
		_ = json.Unmarshal(body, &d)
		mu.Lock()
		got[d.Group] = append(got[d.Group], d.Step)
		mu.Unlock()
		return http.StatusOK
	})
	high := startWith(t, "api", dbURL, q, map[string]string{"DISPATCH_NODE_ID": "1023"})
	low := startWith(t, "api", dbURL, q, map[string]string{"DISPATCH_NODE_ID": "0"})

	const groups = 150
	var wg sync.WaitGroup
	work := make(chan int)
	for range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for g := range work {
				group := fmt.Sprintf("customer-%d", g)
				for _, x := range []struct {
					in   *instance
					step string
				}{{high, "first"}, {low, "second"}} {
					body := jobBody(rc.URL, map[string]any{"groupId": group,
						"payload": fmt.Sprintf(`{"Group":%q,"Step":%q}`, group, x.step)})
					x.in.createJob(body) // answered 201 before the next create begins
				}
			}
		}()
	}
	for g := range groups {
		work <- g
	}
	close(work)
	wg.Wait()
	// The router starts once every group's two jobs wait: it receives
	// both pointers of a group together and must order them itself.
	startWith(t, "router", dbURL, q, map[string]string{"DISPATCH_PROCESS_URL": high.apiURL + "/api/dispatch/process"})

	eventually(t, 90*time.Second, func() bool { return rc.count() >= 2*groups },
		func() string { return fmt.Sprintf("%d of %d deliveries", rc.count(), 2*groups) })
	mu.Lock()
	defer mu.Unlock()
	var wrong []string
	for g, steps := range got {
		if len(steps) != 2 || steps[0] != "first" || steps[1] != "second" {
			wrong = append(wrong, fmt.Sprintf("%s: %v", g, steps))
		}
	}
	if len(wrong) > 0 {
		t.Errorf("%d of %d groups were not delivered in create order: %v", len(wrong), groups, wrong)
	}
}

// An API replica killed between marking a job queued and sending its
// pointer (here: while the send hangs on an SQS endpoint that never
// answers) leaves the job marked as sent with no message anywhere. Another
// replica sends it again once the send lease has run out: the job is
// delivered within about a minute, not after DISPATCH_REQUEUE_AFTER.
func TestAPIKilledBetweenMarkAndSendIsDeliveredWithinAMinute(t *testing.T) {
	t.Parallel()
	sqstest.SetEnv()
	peer := newHungPeer(t)
	dbURL := storetest.NewDatabase(t)
	q := sqstest.New(t, 30*time.Second)
	rc := newReceiver(t, nil)

	hungEnv := baseEnv(dbURL, sqstest.Queue{URL: peer.url() + "/000000000000/hung.fifo"}, map[string]string{
		"AWS_ENDPOINT_URL_SQS": peer.url(),
		"DISPATCH_SQS_TIMEOUT": "60s", // the send is still hanging when the process dies
	})
	doomed := spawn(t, "api", hungEnv)
	in := &instance{t: t, apiURL: doomed.apiURL, queue: q, dbURL: dbURL}
	j := in.createJob(jobBody(rc.URL, nil))
	eventually(t, 20*time.Second, func() bool { return peer.accepted.Load() > 0 },
		func() string { return "the publisher never tried to send" })
	doomed.kill()
	killedAt := time.Now()

	// The survivor: a healthy replica (with its router), default
	// DISPATCH_REQUEUE_AFTER of 15 minutes.
	survivor := startWith(t, "all", dbURL, q, nil)
	done := survivor.waitStatus(j.ID, 90*time.Second, "COMPLETED")
	report(t, "API SIGKILL between mark and send: job %s delivered %.1f s after the kill (send lease %s)",
		done.ID, time.Since(killedAt).Seconds(), "30s")
	if n := rc.count(); n != 1 {
		t.Errorf("the target got %d requests, want 1", n)
	}
}
