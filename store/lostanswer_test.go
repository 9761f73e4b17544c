package store_test

import (
	"bytes"
	"io"
	"net"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/dispatchhq/dispatch"
	"github.com/dispatchhq/dispatch/store"
	"github.com/dispatchhq/dispatch/store/storetest"
)

// cutProxy forwards PostgreSQL connections and, once armed, cuts the
// connection that carries the next answer to an UPDATE, before the client
// reads it: the server has committed the statement (an implicit
// transaction commits before its answer is flushed), the client sees a
// broken connection.
//
// With down set too, the cut starts an outage: every connection is closed
// and new ones are refused until up.
type cutProxy struct {
	addr  string
	mu    sync.Mutex
	arm   bool
	cuts  int
	down  bool // with arm: the cut takes the database away; then: it is away
	conns map[net.Conn]bool
}

func newCutProxy(t *testing.T, target string) *cutProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{addr: ln.Addr().String(), conns: make(map[net.Conn]bool)}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			client, err := ln.Accept()
			if err != nil {
				return
			}
			p.mu.Lock()
			away := p.down && !p.arm
			if !away {
				p.conns[client] = true
			}
			p.mu.Unlock()
			if away {
				client.Close()
				continue
			}
			server, err := net.Dial("tcp", target)
			if err != nil {
				client.Close()
				continue
			}
			wg.Add(2)
			go func() { defer wg.Done(); _, _ = io.Copy(server, client); server.Close() }()
			go func() { defer wg.Done(); p.answers(client, server) }()
		}
	}()
	return p
}

// answers copies the server's answers to the client until it is armed
// and an UPDATE's answer comes by.
func (p *cutProxy) answers(client, server net.Conn) {
	defer client.Close()
	defer server.Close()
	buf := make([]byte, 64<<10)
	for {
		n, err := server.Read(buf)
		if n > 0 {
			p.mu.Lock()
			cut := p.arm && bytes.Contains(buf[:n], []byte("UPDATE "))
			if cut {
				p.arm = false
				p.cuts++
				if p.down {
					for c := range p.conns {
						c.Close()
					}
				}
			}
			p.mu.Unlock()
			if cut {
				return
			}
			if _, err := client.Write(buf[:n]); err != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// cutWithOutage arms the proxy for a cut that takes the database away
// with it, until up.
func (p *cutProxy) cutWithOutage() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down, p.arm = true, true
}

// behindCutProxy opens a database and two stores on it: direct, and st,
// whose connections go through proxy.
func behindCutProxy(t *testing.T) (direct, st *store.Store, proxy *cutProxy) {
	t.Helper()
	dbURL := storetest.NewDatabase(t)
	direct, _ = storetest.Open(t, dbURL, store.Options{NodeID: 1})
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	proxy = newCutProxy(t, u.Host)
	u.Host = proxy.addr
	st, _ = storetest.Open(t, u.String(), store.Options{NodeID: 2})
	return direct, st, proxy
}

// up ends an outage begun by a cut.
func (p *cutProxy) up() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = false
}

func (p *cutProxy) armed(on bool) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.arm = on
	return p.cuts
}

// A claim whose statement committed but whose answer was lost is still
// the claimant's: it delivers the job as attempt 1, rather than finding it
// IN_PROGRESS under a live claim, taking it over after the lease and
// recording a TIMEOUT for an attempt never made (a job with one try would
// end ERROR without a request).
func TestAClaimWhoseAnswerWasLostIsStillTheClaimants(t *testing.T) {
	t.Parallel()
	direct, st, proxy := behindCutProxy(t)

	j := createJob(t, direct, func(j *dispatch.Job) { j.MaxRetries = 1 })
	proxy.armed(true)
	t0 := now()
	c, err := st.ClaimJob(t.Context(), j.ID, t0, lease)
	if cuts := proxy.armed(false); cuts != 1 {
		t.Fatalf("the proxy cut %d answers, want 1 (the claim's)", cuts)
	}
	if err != nil {
		t.Fatalf("ClaimJob with its answer lost: %v; want the claim it made", err)
	}
	if c.State != dispatch.Claimed || c.Job.AttemptCount != 1 || c.Job.Status != dispatch.StatusInProgress {
		t.Fatalf("claim %v, job %s attempt %d; want claimed, IN_PROGRESS attempt 1", c.State, c.Job.Status, c.Job.AttemptCount)
	}
	// Another processor still finds it busy: the claim is one, not two.
	if other, err := direct.ClaimJob(t.Context(), j.ID, t0.Add(time.Second), lease); err != nil || other.State != dispatch.ClaimBusy {
		t.Fatalf("another processor's claim = %v, %v; want busy", other.State, err)
	}
	as, err := direct.ListAttempts(t.Context(), j.ID)
	if err != nil || len(as) != 0 {
		t.Fatalf("attempts %v, %v; want none recorded yet", as, err)
	}
}

// A claim whose answer was lost with the database itself (an outage began
// just after the commit) cannot be recognised then: the claim is an error,
// and no request goes out. When the pointer comes back, after the outage,
// the claim is still this process's: attempt 1 is made at once, not after
// the lease with a TIMEOUT charged for an attempt never made (with one try
// the job would end ERROR without a request). Another replica, which
// cannot know, still finds it busy.
func TestAClaimLostInAnOutageIsStillTheClaimantsAfterIt(t *testing.T) {
	t.Parallel()
	direct, st, proxy := behindCutProxy(t)

	j := createJob(t, direct, func(j *dispatch.Job) { j.MaxRetries = 1 })
	proxy.cutWithOutage()
	t0 := now()
	if _, err := st.ClaimJob(t.Context(), j.ID, t0, lease); err == nil {
		t.Fatal("ClaimJob with its answer lost and the database away: no error")
	}
	if cuts := proxy.armed(false); cuts != 1 {
		t.Fatalf("the proxy cut %d answers, want 1 (the claim's)", cuts)
	}
	if got := getJob(t, direct, j.ID); got.Status != dispatch.StatusInProgress || got.AttemptCount != 1 {
		t.Fatalf("job %s attempt %d after the lost answer; want the claim committed (IN_PROGRESS, attempt 1)", got.Status, got.AttemptCount)
	}
	proxy.up()

	if other, err := direct.ClaimJob(t.Context(), j.ID, t0.Add(2*time.Second), lease); err != nil || other.State != dispatch.ClaimBusy {
		t.Fatalf("another replica's claim = %v, %v; want busy", other.State, err)
	}
	t1 := t0.Add(3 * time.Second)
	c, err := st.ClaimJob(t.Context(), j.ID, t1, lease)
	if err != nil || c.State != dispatch.Claimed {
		t.Fatalf("the pointer back after the outage: claim %v, %v; want this process's claim", c.State, err)
	}
	if c.Job.AttemptCount != 1 || c.Job.ClaimedUntil == nil || !c.Job.ClaimedUntil.Equal(t1.Add(lease)) {
		t.Errorf("claim of attempt %d until %v; want attempt 1 until %v", c.Job.AttemptCount, c.Job.ClaimedUntil, t1.Add(lease))
	}
	applied, err := st.FinishAttempt(t.Context(), dispatch.Attempt{JobID: j.ID, AttemptNumber: 1, AttemptedAt: t1,
		CompletedAt: t1, Status: dispatch.AttemptSuccess, ResponseCode: 200}, dispatch.Transition{Status: dispatch.StatusCompleted})
	if err != nil || !applied {
		t.Fatalf("record: %v, %v", applied, err)
	}
	as, err := direct.ListAttempts(t.Context(), j.ID)
	if err != nil || len(as) != 1 || as[0].Status != dispatch.AttemptSuccess {
		t.Errorf("attempts %+v, %v; want the one delivery, no TIMEOUT", as, err)
	}
}

// A claim whose answer cannot be read at all (the database is gone) is an
// error, as before: the router asks again.
func TestAClaimOnAClosedPoolIsAnError(t *testing.T) {
	t.Parallel()
	st, pool := setup(t)
	j := createJob(t, st)
	pool.Close()
	if _, err := st.ClaimJob(t.Context(), j.ID, now(), lease); err == nil {
		t.Fatalf("ClaimJob on a closed pool = %v; want an error", err)
	}
}

// A claim lost in an outage whose job expired before the pointer came
// back is not delivered: the job ends EXPIRED, as it would have had any
// other processor found it, with no attempt (no request went out).
func TestAClaimLostInAnOutageIsNotDeliveredPastItsJobsExpiry(t *testing.T) {
	t.Parallel()
	direct, st, proxy := behindCutProxy(t)

	t0 := now()
	expires := t0.Add(2 * time.Second)
	j := createJob(t, direct, func(j *dispatch.Job) { j.ExpiresAt = &expires })
	proxy.cutWithOutage()
	if _, err := st.ClaimJob(t.Context(), j.ID, t0, lease); err == nil {
		t.Fatal("ClaimJob with its answer lost and the database away: no error")
	}
	proxy.armed(false)
	proxy.up()

	c, err := st.ClaimJob(t.Context(), j.ID, expires.Add(time.Second), lease)
	if err != nil || c.State != dispatch.ClaimTerminal || c.Job.Status != dispatch.StatusExpired {
		t.Fatalf("the pointer back after the job expired: claim %v, job %s, %v; want it ended EXPIRED", c.State, c.Job.Status, err)
	}
	if as, err := direct.ListAttempts(t.Context(), j.ID); err != nil || len(as) != 0 {
		t.Errorf("attempts %+v, %v; want none", as, err)
	}
}
