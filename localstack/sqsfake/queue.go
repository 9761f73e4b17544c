package sqsfake

import (
	"container/heap"
	"errors"
	"maps"
	"strconv"
	"sync"
	"time"
)

// dedupWindow is how long SQS FIFO remembers a deduplication id.
const dedupWindow = 5 * time.Minute

// queue is one queue's state, behind its own mutex.
//
// Every message belongs to a group: a FIFO queue's MessageGroupId, or, in
// a standard queue, a group of its own, so that one mechanism serves both. A
// group's messages stay in send order in group.msgs until deleted, in flight
// or not; a group is "ready" when none of its messages is in flight and its
// first message is visible. Ready groups wait in a heap ordered by their
// first message's sequence number, so the oldest work goes out first and a
// receive costs O(log groups), however many messages are queued.
type queue struct {
	name    string
	arn     string
	fifo    bool
	created time.Time

	mu       sync.Mutex
	modified time.Time
	attrs    map[string]string
	tags     map[string]string
	deleted  bool

	// settings parsed from attrs
	visibility   time.Duration
	delay        time.Duration
	retention    time.Duration
	maxSize      int
	wait         time.Duration
	contentDedup bool
	groupDedup   bool

	seq    uint64
	byID   map[string]*message
	groups map[string]*group
	ready  readyHeap
	wake   wakeHeap
	order  []*message // every live message in send order, for retention
	dedup  map[string]dedupRecord
	dedupQ []dedupKey // in expiry order

	attempts  map[string]*receiveAttempt // by ReceiveRequestAttemptId (FIFO)
	attemptsQ []dedupKey                 // in expiry order

	total, inflight, delayed int

	signal chan struct{} // closed (and replaced) when a receive may find something
}

type message struct {
	id, body, md5, attrsMD5 string
	msgAttrs                map[string]messageAttribute
	traceHeader             string
	groupID, dedupID        string
	seq                     uint64
	g                       *group
	sent, firstReceive      time.Time
	received                time.Time // this receive's time: its visibility ends at most 12 h after it
	receives                int       // also the generation of the receipt handle
	delayedFor              time.Duration
	visibleAt               time.Time
	version                 int // bumped by every visibility change, invalidates older wake entries
	inflight, delayed, gone bool
}

type group struct {
	id       string
	msgs     []*message
	inflight int
	queued   bool // in the ready heap
}

type dedupRecord struct {
	id  string
	seq uint64
}

// receiveAttempt is what a FIFO receive with a ReceiveRequestAttemptId
// handed out, so that a retry of it (its answer was lost) gets the same
// messages and receipt handles back.
type receiveAttempt struct {
	msgs     []*message
	versions []int // each message's version when handed out: a change since voids the attempt
}

type dedupKey struct {
	key string
	at  time.Time
}

func newQueue(name string, fifo bool, attrs, tags map[string]string, now time.Time) *queue {
	q := &queue{
		name: name, arn: "arn:aws:sqs:" + Region + ":" + AccountID + ":" + name, fifo: fifo,
		created: now, modified: now, attrs: attrs, tags: maps.Clone(tags),
		byID: map[string]*message{}, groups: map[string]*group{}, dedup: map[string]dedupRecord{},
		attempts: map[string]*receiveAttempt{},
		signal:   make(chan struct{}),
	}
	if q.tags == nil {
		q.tags = map[string]string{}
	}
	q.parseAttributes()
	return q
}

func (q *queue) parseAttributes() {
	sec := func(name string) time.Duration {
		n, _ := strconv.Atoi(q.attrs[name])
		return time.Duration(n) * time.Second
	}
	q.visibility = sec("VisibilityTimeout")
	q.delay = sec("DelaySeconds")
	q.retention = sec("MessageRetentionPeriod")
	q.wait = sec("ReceiveMessageWaitTimeSeconds")
	q.maxSize, _ = strconv.Atoi(q.attrs["MaximumMessageSize"])
	q.contentDedup = q.attrs["ContentBasedDeduplication"] == "true"
	q.groupDedup = q.attrs["DeduplicationScope"] == "messageGroup"
}

func (q *queue) sameAttributes(attrs map[string]string) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	for k, v := range attrs {
		if q.attrs[k] != v {
			return false
		}
	}
	return true
}

func (q *queue) setAttributes(attrs map[string]string, now time.Time) {
	q.mu.Lock()
	defer q.mu.Unlock()
	maps.Copy(q.attrs, attrs)
	q.parseAttributes()
	q.modified = now
}

func (q *queue) attributes(now time.Time) map[string]string {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.expire(now)
	a := maps.Clone(q.attrs)
	a["QueueArn"] = q.arn
	a["CreatedTimestamp"] = epochSeconds(q.created)
	a["LastModifiedTimestamp"] = epochSeconds(q.modified)
	a["ApproximateNumberOfMessages"] = strconv.Itoa(q.total - q.inflight - q.delayed)
	a["ApproximateNumberOfMessagesNotVisible"] = strconv.Itoa(q.inflight)
	a["ApproximateNumberOfMessagesDelayed"] = strconv.Itoa(q.delayed)
	return a
}

// notify wakes every long poll waiting on this queue. Callers hold q.mu.
func (q *queue) notify() {
	close(q.signal)
	q.signal = make(chan struct{})
}

// close marks a deleted queue and wakes its waiters, which then fail.
func (q *queue) close() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.deleted = true
	q.notify()
}

func (q *queue) purge() {
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, m := range q.byID {
		m.gone = true
	}
	q.byID = map[string]*message{}
	q.groups = map[string]*group{}
	q.ready, q.wake, q.order = nil, nil, nil
	q.total, q.inflight, q.delayed = 0, 0, 0
}

// expire applies everything time has done by now: in-flight messages whose
// visibility timeout ran out become visible again, delays end, messages
// past the retention period are dropped, old deduplication ids are
// forgotten. Callers hold q.mu.
func (q *queue) expire(now time.Time) {
	for len(q.wake) > 0 && !q.wake[0].at.After(now) {
		w := heap.Pop(&q.wake).(wakeEntry)
		m := w.m
		if m.gone || m.version != w.version {
			continue
		}
		switch {
		case m.inflight:
			m.inflight = false
			m.g.inflight--
			q.inflight--
		case m.delayed:
			m.delayed = false
			q.delayed--
		}
		q.maybeReady(m.g, now)
	}
	for len(q.order) > 0 {
		m := q.order[0]
		if !m.gone && m.sent.Add(q.retention).After(now) {
			break
		}
		q.order[0] = nil
		q.order = q.order[1:]
		if !m.gone {
			q.remove(m, now)
		}
	}
	for len(q.dedupQ) > 0 && !q.dedupQ[0].at.Add(dedupWindow).After(now) {
		delete(q.dedup, q.dedupQ[0].key)
		q.dedupQ = q.dedupQ[1:]
	}
	for len(q.attemptsQ) > 0 && !q.attemptsQ[0].at.Add(dedupWindow).After(now) {
		delete(q.attempts, q.attemptsQ[0].key)
		q.attemptsQ = q.attemptsQ[1:]
	}
}

// errAttemptVoid answers a retried receive whose messages changed since.
var errAttemptVoid = errors.New("attempt void")

// retake answers a receive retried with a known ReceiveRequestAttemptId:
// the same messages, with the same receipt handles, their visibility
// timeout started again. ok is false when the id is unknown (or expired).
// As in SQS, the retry is refused once any of those messages was deleted,
// had its visibility changed or became visible again. Callers hold q.mu.
func (q *queue) retake(id string, visibility time.Duration, now time.Time) (msgs []*message, ok bool, err error) {
	q.expire(now)
	a := q.attempts[id]
	if a == nil {
		return nil, false, nil
	}
	for i, m := range a.msgs {
		if m.gone || !m.inflight || m.version != a.versions[i] {
			return nil, true, errAttemptVoid
		}
	}
	for i, m := range a.msgs {
		m.version++
		m.visibleAt = now.Add(visibility)
		heap.Push(&q.wake, wakeEntry{at: m.visibleAt, m: m, version: m.version})
		a.versions[i] = m.version
	}
	return a.msgs, true, nil
}

// remember records what a receive with a ReceiveRequestAttemptId handed
// out, for five minutes. An empty answer is not recorded: a retry of it
// simply receives. Callers hold q.mu.
func (q *queue) remember(id string, msgs []*message, now time.Time) {
	if id == "" || len(msgs) == 0 || !q.fifo {
		return
	}
	a := &receiveAttempt{msgs: msgs, versions: make([]int, len(msgs))}
	for i, m := range msgs {
		a.versions[i] = m.version
	}
	if _, seen := q.attempts[id]; !seen {
		q.attemptsQ = append(q.attemptsQ, dedupKey{key: id, at: now})
	}
	q.attempts[id] = a
}

// nextWake is when time alone may next make a message visible (zero: never).
func (q *queue) nextWake() time.Time {
	if len(q.wake) == 0 {
		return time.Time{}
	}
	return q.wake[0].at
}

// maybeReady puts g in the ready heap when it can deliver now.
func (q *queue) maybeReady(g *group, now time.Time) {
	if g.queued || g.inflight > 0 || len(g.msgs) == 0 || g.msgs[0].visibleAt.After(now) {
		return
	}
	g.queued = true
	heap.Push(&q.ready, readyEntry{g: g, seq: g.msgs[0].seq})
}

// add enqueues a new message. Callers hold q.mu.
func (q *queue) add(m *message, now time.Time) {
	q.seq++
	m.seq = q.seq
	m.sent = now
	m.visibleAt = now
	key := m.groupID
	if !q.fifo {
		key = m.id // a standard queue holds nothing back
	}
	g := q.groups[key]
	if g == nil {
		g = &group{id: key}
		q.groups[key] = g
	}
	m.g = g
	g.msgs = append(g.msgs, m)
	q.byID[m.id] = m
	q.order = append(q.order, m)
	q.total++
	if d := q.delay; d > 0 || m.delayedFor > 0 {
		if m.delayedFor > d {
			d = m.delayedFor
		}
		m.visibleAt = now.Add(d)
		m.delayed = true
		q.delayed++
		heap.Push(&q.wake, wakeEntry{at: m.visibleAt, m: m, version: m.version})
		q.notify() // waiting polls re-time their wait
		return
	}
	q.maybeReady(g, now)
	q.notify()
}

// take moves up to max visible messages to in flight, a whole group's
// run at a time, oldest group first. Callers hold q.mu.
func (q *queue) take(max int, visibility time.Duration, now time.Time) []*message {
	q.expire(now)
	var out []*message
	for len(out) < max && len(q.ready) > 0 {
		g := heap.Pop(&q.ready).(readyEntry).g
		g.queued = false
		if g.inflight > 0 {
			continue
		}
		for _, m := range g.msgs {
			if len(out) == max || m.visibleAt.After(now) {
				break
			}
			m.inflight = true
			m.receives++
			if m.receives == 1 {
				m.firstReceive = now
			}
			m.received = now
			m.version++
			m.visibleAt = now.Add(visibility)
			g.inflight++
			q.inflight++
			heap.Push(&q.wake, wakeEntry{at: m.visibleAt, m: m, version: m.version})
			out = append(out, m)
			if !q.fifo {
				break
			}
		}
	}
	return out
}

// remove deletes m from the queue. Callers hold q.mu.
func (q *queue) remove(m *message, now time.Time) {
	m.gone = true
	delete(q.byID, m.id)
	g := m.g
	for i, x := range g.msgs {
		if x == m {
			g.msgs = append(g.msgs[:i:i], g.msgs[i+1:]...)
			break
		}
	}
	if m.inflight {
		g.inflight--
		q.inflight--
	}
	if m.delayed {
		q.delayed--
	}
	q.total--
	if len(g.msgs) == 0 {
		if q.groups[g.id] == g {
			delete(q.groups, g.id)
		}
		return
	}
	if !g.queued && g.inflight == 0 {
		q.maybeReady(g, now)
		if g.queued {
			q.notify()
		}
	}
}

// release makes an in-flight message visible at now+d. Callers hold q.mu.
func (q *queue) release(m *message, d time.Duration, now time.Time) {
	m.version++
	m.visibleAt = now.Add(d)
	if d > 0 {
		heap.Push(&q.wake, wakeEntry{at: m.visibleAt, m: m, version: m.version})
		// Long polls already waiting timed their wait by the old wake-up
		// time: let them look again, so this message reaches them when it
		// turns visible rather than when their wait ends.
		q.notify()
		return
	}
	m.inflight = false
	m.g.inflight--
	q.inflight--
	q.maybeReady(m.g, now)
	if m.g.queued {
		q.notify()
	}
}

type readyEntry struct {
	g   *group
	seq uint64 // the group's first message when it became ready
}

type readyHeap []readyEntry

func (h readyHeap) Len() int           { return len(h) }
func (h readyHeap) Less(i, j int) bool { return h[i].seq < h[j].seq }
func (h readyHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *readyHeap) Push(x any)        { *h = append(*h, x.(readyEntry)) }
func (h *readyHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	old[len(old)-1] = readyEntry{}
	*h = old[:len(old)-1]
	return x
}

type wakeEntry struct {
	at      time.Time
	m       *message
	version int
}

type wakeHeap []wakeEntry

func (h wakeHeap) Len() int           { return len(h) }
func (h wakeHeap) Less(i, j int) bool { return h[i].at.Before(h[j].at) }
func (h wakeHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *wakeHeap) Push(x any)        { *h = append(*h, x.(wakeEntry)) }
func (h *wakeHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	old[len(old)-1] = wakeEntry{}
	*h = old[:len(old)-1]
	return x
}
