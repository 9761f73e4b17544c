package e2e

// Proof at scale: many jobs in many ordered groups through two API
// processes and two routers, with random SIGKILLs of both, one restart of the
// SQS stand-in (its messages lost) and one PostgreSQL restart; and a backlog
// drained by routers started only after every job was queued. `make test`
// runs both small; `make soak` runs them at full size (100,000 jobs in 2,000
// groups; a 50,000-job backlog) and prints the figures.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/jackc/pgx/v5"
	"golang.org/x/sync/errgroup"

	"github.com/dispatchhq/dispatch/router/sqstest"
	"github.com/dispatchhq/dispatch/store/storetest"
)

// forBatches calls fn on successive [from, to) ranges of n items, 100 at a
// time, at most four at once, and returns when all are done.
func forBatches(n int, fn func(from, to int)) {
	var g errgroup.Group
	g.SetLimit(4)
	for b := 0; b < n; b += 100 {
		g.Go(func() error {
			fn(b, min(b+100, n))
			return nil
		})
	}
	_ = g.Wait()
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// scaleReceiver is the webhook target: it records, in arrival order, every
// successful delivery of every job, and fails the first attempt of one job
// in fifty so retries and group holds happen throughout.
type scaleReceiver struct {
	*httptest.Server
	mu        sync.Mutex
	seq       int
	first     map[string]int       // job id -> arrival number of its first 200
	firstAt   map[string]time.Time // job id -> when
	successes map[string]int       // job id -> 200s answered
	pos       map[string][2]int    // job id -> group, round
	failed    map[string]bool
}

func newScaleReceiver(t *testing.T) *scaleReceiver {
	rc := &scaleReceiver{first: map[string]int{}, firstAt: map[string]time.Time{}, successes: map[string]int{},
		pos: map[string][2]int{}, failed: map[string]bool{}}
	rc.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var p struct{ G, R int }
		body, _ := io.ReadAll(r.Body)
		_ = json.Unmarshal(body, &p)
		id := r.Header.Get("X-Dispatch-Job-Id")
		rc.mu.Lock()
		defer rc.mu.Unlock()
		rc.seq++
		if (p.G+p.R)%50 == 7 && !rc.failed[id] {
			rc.failed[id] = true
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		if _, ok := rc.first[id]; !ok {
			rc.first[id] = rc.seq
			rc.firstAt[id] = time.Now()
			rc.pos[id] = [2]int{p.G, p.R}
		}
		rc.successes[id]++
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(rc.Close)
	return rc
}

func (rc *scaleReceiver) delivered() int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return len(rc.first)
}

// chaosEvent is a failure the test caused, for explaining duplicates.
type chaosEvent struct {
	what string
	at   time.Time
}

// sqsAPI is an SDK client for a private stand-in.
func sqsAPI(t *testing.T, endpoint string) *sqs.Client {
	cfg, err := config.LoadDefaultConfig(context.Background(), config.WithRegion("us-east-1"),
		config.WithCredentialsProvider(credentials.NewStaticCredentialsProvider("local", "local", "")))
	if err != nil {
		t.Fatal(err)
	}
	return sqs.NewFromConfig(cfg, func(o *sqs.Options) { o.BaseEndpoint = aws.String(endpoint) })
}

// ensureQueue creates the FIFO queue (or fixes the visibility of one that
// dispatch re-created first), as an operator's infrastructure code would.
func ensureQueue(t *testing.T, api *sqs.Client, name string, visibility int) {
	t.Helper()
	ctx := context.Background()
	_, err := api.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(name),
		Attributes: map[string]string{"FifoQueue": "true", "VisibilityTimeout": strconv.Itoa(visibility)}})
	if err == nil {
		return
	}
	url, err := api.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String(name)})
	if err != nil {
		t.Fatalf("queue %s: %v", name, err)
	}
	if _, err := api.SetQueueAttributes(ctx, &sqs.SetQueueAttributesInput{QueueUrl: url.QueueUrl,
		Attributes: map[string]string{"VisibilityTimeout": strconv.Itoa(visibility)}}); err != nil {
		t.Fatalf("queue %s: %v", name, err)
	}
}

// TestScaleChaos runs alone, before the parallel tests: its kills come on
// a clock until 97% of the jobs are delivered, so under their load it would
// slow, be killed more often and slow further, toward its deadline.
func TestScaleChaos(t *testing.T) {
	jobs := envInt("DISPATCH_TEST_SCALE_JOBS", 1200)
	groups := envInt("DISPATCH_TEST_SCALE_GROUPS", max(1, jobs/50))
	rounds := (jobs + groups - 1) / groups
	jobs = rounds * groups
	started := time.Now()

	pg := startPostgres(t, "")
	sq := startEmulator(t, freePort(t))
	const queueName = "scale.fifo"
	api := sqsAPI(t, sq.url())
	ensureQueue(t, api, queueName, 5)
	rc := newScaleReceiver(t)

	common := map[string]string{
		"DATABASE_URL": pg.url("dispatch"), "AWS_ENDPOINT_URL_SQS": sq.url(), "DISPATCH_QUEUE_URL": "",
		"DISPATCH_QUEUE_NAME": queueName, "DISPATCH_QUEUE_CREATE": "true", "DISPATCH_LOG_LEVEL": "warn",
		"DISPATCH_REQUEUE_AFTER": "20s", "DISPATCH_RETRY_MAX": "3s",
	}
	with := func(extra map[string]string) []string {
		m := map[string]string{}
		for k, v := range common {
			m[k] = v
		}
		for k, v := range extra {
			m[k] = v
		}
		return baseEnv("", sqstest.Queue{}, m)
	}
	key := testKey()
	apiPorts := []int{freePort(t), freePort(t)}
	apiEnv := make([][]string, 2)
	routerEnv := make([][]string, 2)
	for i := range 2 {
		apiEnv[i] = with(map[string]string{"DISPATCH_HTTP_ADDR": fmt.Sprintf("127.0.0.1:%d", apiPorts[i]),
			"DISPATCH_NODE_ID": strconv.Itoa(i + 1), "DISPATCH_ENCRYPTION_KEY": key})
		routerEnv[i] = with(map[string]string{"DISPATCH_PROCESS_URL": fmt.Sprintf("http://127.0.0.1:%d/api/dispatch/process", apiPorts[i]),
			"DISPATCH_POOLS": "DISPATCH-POOL:32", "DISPATCH_ENCRYPTION_KEY": key})
	}
	procs := map[string]*proc{}
	startProc := func(name string) {
		i := int(name[len(name)-1] - '1')
		if strings.HasPrefix(name, "api") {
			procs[name] = spawn(t, "api", apiEnv[i])
		} else {
			procs[name] = spawn(t, "router", routerEnv[i])
		}
	}
	for _, n := range []string{"api1", "api2", "router1", "router2"} {
		startProc(n)
	}

	// Creation: round by round, so job r of a group is created (201) before
	// job r+1; batches of 100 go to either API, retried with the same
	// idempotency keys while that API is down.
	var createErrs atomic.Int64
	created := make(chan struct{})
	createStart := time.Now()
	var createdIn time.Duration
	go func() {
		defer close(created)
		client := &http.Client{Timeout: 30 * time.Second}
		for r := range rounds {
			forBatches(groups, func(b, end int) {
				var batch []map[string]any
				for g := b; g < end; g++ {
					batch = append(batch, map[string]any{
						"source": "scale", "type": "scale.test", "targetUrl": rc.URL,
						"payload": fmt.Sprintf(`{"g":%d,"r":%d}`, g, r), "groupId": fmt.Sprintf("grp-%d", g),
						"idempotencyKey": fmt.Sprintf("s-%d-%d", g, r),
					})
				}
				body, _ := json.Marshal(map[string]any{"jobs": batch})
				deadline := time.Now().Add(3 * time.Minute)
				for try := 0; time.Now().Before(deadline); try++ {
					port := apiPorts[(b/100+try)%2]
					req, _ := http.NewRequest("POST", fmt.Sprintf("http://127.0.0.1:%d/api/dispatch/jobs/batch", port), strings.NewReader(string(body)))
					req.Header.Set("Content-Type", "application/json")
					req.Header.Set("Authorization", "Bearer "+apiToken)
					resp, err := client.Do(req)
					if err == nil {
						var out struct{ Results []struct{ Status int } }
						_ = json.NewDecoder(resp.Body).Decode(&out)
						resp.Body.Close()
						ok := resp.StatusCode == http.StatusOK && len(out.Results) == len(batch)
						for _, res := range out.Results {
							ok = ok && (res.Status == http.StatusCreated || res.Status == http.StatusOK)
						}
						if ok {
							return
						}
					}
					createErrs.Add(1)
					time.Sleep(200 * time.Millisecond) // client-side retry pause while an API restarts
				}
				t.Errorf("batch %d of round %d was not accepted within 3 minutes", b, r)
			})
		}
		createdIn = time.Since(createStart)
	}()

	// Chaos until every job has been delivered.
	var events []chaosEvent
	kills := map[string]int{}
	sqsRestarted, pgRestarted := false, false
	nextKill := time.Now().Add(time.Duration(500+rand.IntN(1500)) * time.Millisecond)
	deadline := time.Now().Add(time.Duration(240+jobs/50) * time.Second)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for rc.delivered() < jobs {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d jobs delivered by the deadline; jobs by state %v; queue %v; events %v",
				rc.delivered(), jobs, jobStates(t, pg.url("dispatch")), queueCounts(api, queueName), events)
		}
		<-tick.C
		progress := float64(rc.delivered()) / float64(jobs)
		switch {
		case !sqsRestarted && progress >= 0.3:
			sq.stop()
			sq.start()
			ensureQueue(t, api, queueName, 5)
			sqsRestarted = true
			events = append(events, chaosEvent{"stand-in restart", time.Now()})
		case !pgRestarted && progress >= 0.6:
			events = append(events, chaosEvent{"postgres restart", time.Now()})
			pg.ctl("restart")
			pgRestarted = true
		case time.Now().After(nextKill) && progress < 0.97:
			name := []string{"api1", "api2", "router1", "router2"}[rand.IntN(4)]
			procs[name].kill()
			events = append(events, chaosEvent{"SIGKILL " + name, time.Now()})
			kills[name]++
			startProc(name)
			nextKill = time.Now().Add(time.Duration(500+rand.IntN(2500)) * time.Millisecond)
		}
	}
	<-created
	deliveredIn := time.Since(started)

	// Every job terminal, none lost, none doubled.
	conn, err := pgx.Connect(context.Background(), pg.url("dispatch"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var statuses map[string]int
	eventually(t, 2*time.Minute, func() bool {
		statuses = map[string]int{}
		rows, err := conn.Query(context.Background(), `SELECT status, count(*) FROM dispatch_job GROUP BY status`)
		if err != nil {
			return false
		}
		defer rows.Close()
		for rows.Next() {
			var s string
			var n int
			_ = rows.Scan(&s, &n)
			statuses[s] = n
		}
		return statuses["COMPLETED"] == jobs
	}, func() string { return fmt.Sprintf("job states %v, want %d COMPLETED", statuses, jobs) })
	if len(statuses) != 1 {
		t.Errorf("job states %v: every job should be COMPLETED exactly once", statuses)
	}

	rc.mu.Lock()
	defer rc.mu.Unlock()
	// Order: within a group, job r's first successful delivery arrived before job r+1's.
	byGroup := make([][]int, groups) // round -> arrival number
	for i := range byGroup {
		byGroup[i] = make([]int, rounds)
	}
	for id, seq := range rc.first {
		p := rc.pos[id]
		byGroup[p[0]][p[1]] = seq
	}
	outOfOrder := 0
	for g := range byGroup {
		for r := 1; r < rounds; r++ {
			if byGroup[g][r] != 0 && byGroup[g][r-1] != 0 && byGroup[g][r] < byGroup[g][r-1] {
				outOfOrder++
				if outOfOrder <= 5 {
					t.Errorf("group %d: job %d delivered before job %d", g, r, r-1)
				}
			}
		}
	}
	// Duplicates: each must follow a failure that can lose an outcome — an
	// API killed, or PostgreSQL restarted, while the delivery was in flight.
	dups, unexplained := 0, 0
	explainedBy := map[string]int{}
	for id, n := range rc.successes {
		if n < 2 {
			continue
		}
		dups += n - 1
		at := rc.firstAt[id]
		found := ""
		for _, e := range events {
			if (strings.HasPrefix(e.what, "SIGKILL api") || e.what == "postgres restart") &&
				!e.at.Before(at.Add(-time.Second)) && e.at.Sub(at) < 40*time.Second {
				found = e.what
				break
			}
		}
		if found == "" {
			unexplained++
			if unexplained <= 5 {
				t.Errorf("job %s delivered %d times, first at %s, with no API kill or PostgreSQL restart just after", id, n, at.Format(time.RFC3339Nano))
			}
		} else {
			explainedBy[strings.TrimSuffix(strings.TrimSuffix(found, "1"), "2")] += n - 1
		}
	}
	report(t, "scale chaos: %d jobs in %d groups, 2 APIs + 2 routers; %d router kills, %d API kills (SIGKILL), 1 stand-in restart, 1 PostgreSQL restart; "+
		"created in %s (%d create retries), all delivered in %s (%.0f jobs/s); lost 0 of %d; out of order %d; duplicate deliveries %d (explained: %v; unexplained %d)",
		jobs, groups, kills["router1"]+kills["router2"], kills["api1"]+kills["api2"], createdIn.Round(time.Millisecond), createErrs.Load(),
		deliveredIn.Round(time.Millisecond), float64(jobs)/deliveredIn.Seconds(), jobs, outOfOrder, dups, explainedBy, unexplained)
	if len(rc.first) != jobs {
		t.Errorf("%d of %d jobs delivered", len(rc.first), jobs)
	}
}

// TestBacklogDrain queues every job before any router runs, then starts two
// routers and lets them drain the queue: no stall, no receive error.
func TestBacklogDrain(t *testing.T) {
	t.Parallel()
	jobs := envInt("DISPATCH_TEST_BACKLOG_JOBS", 2000)
	dbURL := storetest.NewDatabase(t)
	q := sqstest.New(t, 30*time.Second)
	rc := newScaleReceiver(t)
	in := startWith(t, "api", dbURL, q, map[string]string{"DISPATCH_LOG_LEVEL": "warn"})

	createStart := time.Now()
	forBatches(jobs, func(b, end int) {
		var batch []map[string]any
		for i := b; i < end; i++ {
			// Every fifth job in one of 100 ordered groups; the rest unordered.
			extra := map[string]any{"payload": fmt.Sprintf(`{"g":%d,"r":%d}`, i%100, i)}
			if i%5 == 0 {
				extra["groupId"] = fmt.Sprintf("g%d", i%100)
			}
			batch = append(batch, jobBody(rc.URL, extra))
		}
		if code := in.do("POST", "/api/dispatch/jobs/batch", apiToken, map[string]any{"jobs": batch}, nil); code != http.StatusOK {
			t.Errorf("batch: %d", code)
		}
	})
	created := time.Since(createStart)
	eventually(t, 5*time.Minute, func() bool {
		a, err := q.Attributes(context.Background())
		return err == nil && a["ApproximateNumberOfMessages"] == strconv.Itoa(jobs)
	}, func() string {
		a, _ := q.Attributes(context.Background())
		return fmt.Sprintf("queue holds %s of %d pointers", a["ApproximateNumberOfMessages"], jobs)
	})
	queued := time.Since(createStart)

	drainStart := time.Now()
	env := baseEnv(dbURL, q, map[string]string{"DISPATCH_PROCESS_URL": in.apiURL + "/api/dispatch/process",
		"DISPATCH_LOG_LEVEL": "warn", "DISPATCH_POOLS": "DISPATCH-POOL:32"})
	routers := []*proc{spawn(t, "router", env), spawn(t, "router", env)}
	// A drain that delivers nothing for 30 s has stalled.
	for last := 0; last < jobs; last = rc.delivered() {
		eventually(t, 30*time.Second, func() bool { return rc.delivered() > last },
			func() string { return fmt.Sprintf("drain stalled at %d of %d for 30 s", rc.delivered(), jobs) })
	}
	drained := time.Since(drainStart)
	eventually(t, time.Minute, func() bool { return in.countStatus("COMPLETED") == jobs },
		func() string { return fmt.Sprintf("%d of %d COMPLETED", in.countStatus("COMPLETED"), jobs) })
	receiveErrors := 0
	for _, r := range routers {
		receiveErrors += strings.Count(r.log.String(), "receive failed")
	}
	report(t, "backlog: %d jobs created in %s, all queued after %s, drained by 2 routers in %s (%.0f jobs/s); receive errors %d",
		jobs, created.Round(time.Millisecond), queued.Round(time.Millisecond), drained.Round(time.Millisecond),
		float64(jobs)/drained.Seconds(), receiveErrors)
	if receiveErrors > 0 {
		t.Errorf("%d receive errors while draining a backlog of %d", receiveErrors, jobs)
	}
}

// jobStates counts jobs by status, for failure messages.
func jobStates(t *testing.T, dbURL string) map[string]int {
	out := map[string]int{}
	conn, err := pgx.Connect(context.Background(), dbURL)
	if err != nil {
		return out
	}
	defer conn.Close(context.Background())
	rows, err := conn.Query(context.Background(), `SELECT status || CASE WHEN queued_at IS NULL THEN ' unsent' ELSE '' END, count(*) FROM dispatch_job GROUP BY 1`)
	if err != nil {
		return out
	}
	for rows.Next() {
		var s string
		var n int
		_ = rows.Scan(&s, &n)
		out[s] = n
	}
	rows.Close()
	live, err := conn.Query(context.Background(), `
		SELECT format('%s %s group=%s attempts=%s gen=%s queued=%s next=%s claimed=%s', id, status, group_id, attempt_count,
			pointer_gen, to_char(queued_at, 'HH24:MI:SS.MS'), to_char(next_attempt_at, 'HH24:MI:SS.MS'), to_char(claimed_until, 'HH24:MI:SS.MS'))
		FROM dispatch_job WHERE status NOT IN ('COMPLETED', 'ERROR', 'CANCELLED', 'EXPIRED') ORDER BY id LIMIT 10`)
	if err != nil {
		return out
	}
	defer live.Close()
	for live.Next() {
		var s string
		_ = live.Scan(&s)
		out["live: "+s] = 1
	}
	out["now: "+time.Now().UTC().Format("15:04:05.000")] = 0
	return out
}

// queueCounts reads the queue's message counts, for failure messages.
func queueCounts(api *sqs.Client, name string) map[string]string {
	ctx := context.Background()
	url, err := api.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String(name)})
	if err != nil {
		return map[string]string{"error": err.Error()}
	}
	out, err := api.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: url.QueueUrl,
		AttributeNames: []types.QueueAttributeName{"ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"}})
	if err != nil {
		return map[string]string{"error": err.Error()}
	}
	return out.Attributes
}
