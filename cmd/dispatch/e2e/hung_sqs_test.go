package e2e

import (
	"context"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dispatchhq/dispatch/router/sqstest"
	"github.com/dispatchhq/dispatch/store/storetest"
)

// hungPeer accepts TCP connections on loopback and never answers.
type hungPeer struct {
	ln       net.Listener
	accepted atomic.Int64
	mu       sync.Mutex
	conns    []net.Conn
	done     chan struct{}
}

func newHungPeer(t *testing.T) *hungPeer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &hungPeer{ln: ln, done: make(chan struct{})}
	go func() {
		defer close(p.done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.accepted.Add(1)
			p.mu.Lock()
			p.conns = append(p.conns, c) // read nothing, write nothing
			p.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-p.done
		p.mu.Lock()
		for _, c := range p.conns {
			c.Close()
		}
		p.mu.Unlock()
	})
	return p
}

func (p *hungPeer) url() string { return "http://" + p.ln.Addr().String() }

// An SQS endpoint that accepts connections and never answers: the
// publisher gives up within DISPATCH_SQS_TIMEOUT and says so, no row lock or
// open transaction is held while it waits, and cancelling a job is prompt.
func TestHungSQSHoldsNoRowLocks(t *testing.T) {
	t.Parallel()
	sqstest.SetEnv() // local credentials: the SDK must never look further
	peer := newHungPeer(t)
	dbURL := storetest.NewDatabase(t)
	in := startWith(t, "api", dbURL, sqstest.Queue{URL: peer.url() + "/000000000000/hung.fifo"}, map[string]string{
		"AWS_ENDPOINT_URL_SQS": peer.url(),
		"DISPATCH_SQS_TIMEOUT": "2s",
	})
	rc := newReceiver(t, nil)
	var ids []string
	for range 5 {
		ids = append(ids, in.createJob(jobBody(rc.URL, nil)).ID)
	}
	eventually(t, 10*time.Second, func() bool { return peer.accepted.Load() > 0 },
		func() string { return "the publisher never reached the SQS endpoint" })
	sendStarted := time.Now()

	// Cancelling a job the publisher is trying to send answers at once.
	client := &http.Client{Timeout: 5 * time.Second}
	req, _ := http.NewRequest("POST", in.apiURL+"/api/dispatch/jobs/"+ids[0]+"/cancel", nil)
	req.Header.Set("Authorization", "Bearer "+apiToken)
	began := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("cancel while SQS hangs: %v (after %v)", err, time.Since(began).Round(time.Millisecond))
	}
	resp.Body.Close()
	took := time.Since(began)
	report(t, "hung SQS: cancel answered %d in %v", resp.StatusCode, took.Round(time.Millisecond))
	if resp.StatusCode != http.StatusOK || took > time.Second {
		t.Errorf("cancel = %d after %v, want 200 at once", resp.StatusCode, took)
	}

	// No session sits idle in a transaction while the send hangs.
	conn, err := pgx.Connect(t.Context(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	tick := time.NewTicker(200 * time.Millisecond) // sample for 2 s
	defer tick.Stop()
	for range 10 {
		<-tick.C
		var n int
		if err := conn.QueryRow(t.Context(), `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND state = 'idle in transaction'
				AND state_change < now() - interval '500 milliseconds'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			t.Fatalf("%d sessions idle in transaction while SQS hangs", n)
		}
	}

	// The publisher gives up within its deadline and says so.
	eventually(t, 5*time.Second, func() bool { return strings.Contains(in.stderr.String(), "publishing failed") },
		func() string { return "no 'publishing failed' in the log while SQS hangs" })
	report(t, "hung SQS: publisher gave up and logged after %v", time.Since(sendStarted).Round(100*time.Millisecond))
}
