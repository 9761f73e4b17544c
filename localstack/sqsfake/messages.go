package sqsfake

import (
	"context"
	"crypto/md5"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

var (
	batchIDRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,80}$`)
	// MessageGroupId and MessageDeduplicationId: alphanumerics and punctuation, 1 to 128.
	groupIDRE = regexp.MustCompile("^[A-Za-z0-9!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~]{1,128}$")
)

type messageAttribute struct {
	DataType         string
	StringValue      *string `json:",omitempty"`
	BinaryValue      []byte  `json:",omitempty"`
	StringListValues []string
	BinaryListValues [][]byte
}

type sendEntry struct {
	Id                      string
	MessageBody             *string
	DelaySeconds            *int
	MessageAttributes       map[string]messageAttribute
	MessageSystemAttributes map[string]messageAttribute
	MessageDeduplicationId  *string
	MessageGroupId          *string
}

type sendResult struct {
	Id                     string `json:",omitempty"`
	MessageId              string
	MD5OfMessageBody       string
	MD5OfMessageAttributes string `json:",omitempty"`
	SequenceNumber         string `json:",omitempty"`
}

func (s *Server) sendMessage(_ *http.Request, body []byte) (any, error) {
	var in struct {
		queueRef
		sendEntry
	}
	q, err := s.open(body, &in)
	if err != nil {
		return nil, err
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.send(in.sendEntry, s.now())
}

func (s *Server) sendMessageBatch(_ *http.Request, body []byte) (any, error) {
	var in struct {
		queueRef
		Entries []sendEntry
	}
	q, err := s.open(body, &in)
	if err != nil {
		return nil, err
	}
	ids := make([]string, len(in.Entries))
	size := 0
	for i, e := range in.Entries {
		ids[i] = e.Id
		if e.MessageBody != nil {
			size += len(*e.MessageBody) + attributesSize(e.MessageAttributes)
		}
	}
	if err := checkBatch(ids); err != nil {
		return nil, err
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if size > q.maxSize {
		return nil, &apiError{status: 400, code: "BatchRequestTooLong", query: "AWS.SimpleQueueService.BatchRequestTooLong;Sender",
			message: fmt.Sprintf("Batch requests cannot be longer than %d bytes.", q.maxSize)}
	}
	out := batchResult[sendResult]{Successful: []sendResult{}, Failed: []batchFailure{}}
	now := s.now()
	for _, e := range in.Entries {
		res, err := q.send(e, now)
		if err != nil {
			out.fail(e.Id, err)
			continue
		}
		res.Id = e.Id
		out.Successful = append(out.Successful, res)
	}
	return out, nil
}

// send validates and enqueues one message. Callers hold q.mu.
func (q *queue) send(e sendEntry, now time.Time) (sendResult, error) {
	if q.deleted {
		return sendResult{}, noQueue()
	}
	if e.MessageBody == nil || *e.MessageBody == "" {
		return sendResult{}, missing("MessageBody")
	}
	body := *e.MessageBody
	if !validBody(body) {
		return sendResult{}, &apiError{status: 400, code: "InvalidMessageContents", query: "InvalidMessageContents;Sender",
			message: "Invalid characters found. Valid unicode characters are #x9 | #xA | #xD | #x20 to #xD7FF | #xE000 to #xFFFD | #x10000 to #x10FFFF"}
	}
	if n := len(body) + attributesSize(e.MessageAttributes); n > q.maxSize {
		return sendResult{}, invalid("One or more parameters are invalid. Reason: Message must be shorter than %d bytes.", q.maxSize)
	}
	attrsMD5, err := attributesMD5(e.MessageAttributes)
	if err != nil {
		return sendResult{}, err
	}
	m := &message{id: newID(), body: body, md5: md5Hex(body), attrsMD5: attrsMD5, msgAttrs: e.MessageAttributes}
	if t, ok := e.MessageSystemAttributes["AWSTraceHeader"]; ok && t.StringValue != nil {
		m.traceHeader = *t.StringValue
	}
	if e.DelaySeconds != nil {
		if q.fifo {
			return sendResult{}, invalid("Value %d for parameter DelaySeconds is invalid. Reason: The request include parameter that is not valid for this queue type.", *e.DelaySeconds)
		}
		if *e.DelaySeconds < 0 || *e.DelaySeconds > 900 {
			return sendResult{}, invalid("Value %d for parameter DelaySeconds is invalid. Reason: must be from 0 to 900.", *e.DelaySeconds)
		}
		m.delayedFor = time.Duration(*e.DelaySeconds) * time.Second
	}
	if !q.fifo {
		if e.MessageDeduplicationId != nil {
			return sendResult{}, invalid("The request include parameter MessageDeduplicationId that is not valid for this queue type")
		}
		if e.MessageGroupId != nil { // fair queues: accepted, orders nothing
			m.groupID = *e.MessageGroupId
		}
		q.add(m, now)
		return sendResult{MessageId: m.id, MD5OfMessageBody: m.md5, MD5OfMessageAttributes: m.attrsMD5}, nil
	}
	if e.MessageGroupId == nil || *e.MessageGroupId == "" {
		return sendResult{}, missing("MessageGroupId")
	}
	if !groupIDRE.MatchString(*e.MessageGroupId) {
		return sendResult{}, invalid("Value %s for parameter MessageGroupId is invalid. Reason: 1 to 128 alphanumeric or punctuation characters.", *e.MessageGroupId)
	}
	m.groupID = *e.MessageGroupId
	switch {
	case e.MessageDeduplicationId != nil:
		if !groupIDRE.MatchString(*e.MessageDeduplicationId) {
			return sendResult{}, invalid("Value %s for parameter MessageDeduplicationId is invalid. Reason: 1 to 128 alphanumeric or punctuation characters.", *e.MessageDeduplicationId)
		}
		m.dedupID = *e.MessageDeduplicationId
	case q.contentDedup:
		sum := sha256.Sum256([]byte(body))
		m.dedupID = hex.EncodeToString(sum[:])
	default:
		return sendResult{}, invalid("The queue should either have ContentBasedDeduplication enabled or MessageDeduplicationId provided explicitly")
	}
	q.expire(now)
	key := m.dedupID
	if q.groupDedup {
		key = m.groupID + "\x00" + key
	}
	if prev, ok := q.dedup[key]; ok {
		// A duplicate inside the window: accepted, not delivered again.
		return sendResult{MessageId: prev.id, MD5OfMessageBody: m.md5, MD5OfMessageAttributes: m.attrsMD5,
			SequenceNumber: sequenceNumber(prev.seq)}, nil
	}
	q.add(m, now)
	q.dedup[key] = dedupRecord{id: m.id, seq: m.seq}
	q.dedupQ = append(q.dedupQ, dedupKey{key: key, at: now})
	return sendResult{MessageId: m.id, MD5OfMessageBody: m.md5, MD5OfMessageAttributes: m.attrsMD5,
		SequenceNumber: sequenceNumber(m.seq)}, nil
}

type receiveInput struct {
	queueRef
	MaxNumberOfMessages         *int
	WaitTimeSeconds             *int
	VisibilityTimeout           *int
	AttributeNames              []string
	MessageSystemAttributeNames []string
	MessageAttributeNames       []string
	ReceiveRequestAttemptId     string
}

type receivedMessage struct {
	MessageId              string
	ReceiptHandle          string
	MD5OfBody              string
	Body                   string
	Attributes             map[string]string           `json:",omitempty"`
	MD5OfMessageAttributes string                      `json:",omitempty"`
	MessageAttributes      map[string]messageAttribute `json:",omitempty"`
}

func (s *Server) receiveMessage(r *http.Request, body []byte) (any, error) {
	var in receiveInput
	q, err := s.open(body, &in)
	if err != nil {
		return nil, err
	}
	max := 1
	if in.MaxNumberOfMessages != nil {
		max = *in.MaxNumberOfMessages
		if max < 1 || max > 10 {
			return nil, invalid("Value %d for parameter MaxNumberOfMessages is invalid. Reason: Must be between 1 and 10, if provided.", max)
		}
	}
	if in.WaitTimeSeconds != nil && (*in.WaitTimeSeconds < 0 || *in.WaitTimeSeconds > 20) {
		return nil, invalid("Value %d for parameter WaitTimeSeconds is invalid. Reason: Must be >= 0 and <= 20, if provided.", *in.WaitTimeSeconds)
	}
	if in.VisibilityTimeout != nil && (*in.VisibilityTimeout < 0 || *in.VisibilityTimeout > 43200) {
		return nil, invalid("Value %d for parameter VisibilityTimeout is invalid. Reason: Must be >= 0 and <= 43200, if provided.", *in.VisibilityTimeout)
	}
	sys := slices.Concat(in.AttributeNames, in.MessageSystemAttributeNames)

	q.mu.Lock()
	wait := q.wait
	if in.WaitTimeSeconds != nil {
		wait = time.Duration(*in.WaitTimeSeconds) * time.Second
	}
	visibility := q.visibility
	if in.VisibilityTimeout != nil {
		visibility = time.Duration(*in.VisibilityTimeout) * time.Second
	}
	q.mu.Unlock()

	attempt := ""
	if q.fifo && in.ReceiveRequestAttemptId != "" {
		attempt = in.ReceiveRequestAttemptId
		if !groupIDRE.MatchString(attempt) {
			return nil, invalid("Value %s for parameter ReceiveRequestAttemptId is invalid. Reason: 1 to 128 alphanumeric or punctuation characters.", truncate(attempt, 64))
		}
	}
	render := func(m *message) receivedMessage { return q.render(m, sys, in.MessageAttributeNames) }
	msgs, err := q.receive(r.Context(), max, wait, visibility, attempt, s.now, render)
	if errors.Is(err, errAttemptVoid) {
		return nil, invalid("Value %s for parameter ReceiveRequestAttemptId is invalid. Reason: The receiveRequestAttemptId is not valid anymore since the receive call is not retryable.", truncate(attempt, 64))
	}
	if err != nil {
		return nil, err
	}
	return struct {
		Messages []receivedMessage `json:",omitempty"`
	}{msgs}, nil
}

// receive takes up to max messages, waiting up to wait for the first one.
// It returns as soon as at least one message is available, as SQS long
// polling does. Messages are taken only while the client still waits, so a
// client that hung up takes none.
//
// A retry of an earlier receive with the same attempt id (FIFO) answers
// what that receive handed out, at once: see retake.
func (q *queue) receive(ctx context.Context, max int, wait, visibility time.Duration, attempt string, now func() time.Time,
	render func(*message) receivedMessage) ([]receivedMessage, error) {
	deadline := time.Now().Add(wait)
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		gone := clientGone(ctx) // before the lock: a system call
		q.mu.Lock()
		if q.deleted {
			q.mu.Unlock()
			return nil, noQueue()
		}
		if ctx.Err() != nil || gone {
			q.mu.Unlock()
			return nil, nil
		}
		t := now()
		if attempt != "" {
			msgs, ok, err := q.retake(attempt, visibility, t)
			if err != nil {
				q.mu.Unlock()
				return nil, err
			}
			if ok {
				out := renderAll(msgs, render)
				q.mu.Unlock()
				return out, nil
			}
		}
		msgs := q.take(max, visibility, t)
		q.remember(attempt, msgs, t)
		left := time.Until(deadline)
		if len(msgs) > 0 || left <= 0 {
			out := renderAll(msgs, render)
			q.mu.Unlock()
			return out, nil
		}
		if next := q.nextWake(); !next.IsZero() && next.Sub(t) < left {
			left = max64(next.Sub(t), time.Millisecond)
		}
		signal := q.signal
		q.mu.Unlock()
		if timer == nil {
			timer = time.NewTimer(left)
		} else {
			timer.Reset(left)
		}
		select {
		case <-signal:
			if !timer.Stop() {
				<-timer.C
			}
			// A receiver that stopped its long poll may have given its
			// messages back: the poll must not take them then, or they
			// would wait out their visibility timeout. The next turn
			// looks at the connection (ConnContext); without it, let the
			// goroutines already runnable go first, among them perhaps
			// the server noticing that this poll's client has gone.
			runtime.Gosched()
		case <-timer.C:
		case <-ctx.Done():
			return nil, nil
		}
	}
}

func renderAll(msgs []*message, render func(*message) receivedMessage) []receivedMessage {
	out := make([]receivedMessage, len(msgs))
	for i, m := range msgs {
		out[i] = render(m)
	}
	return out
}

func max64(a, b time.Duration) time.Duration {
	if a > b {
		return a
	}
	return b
}

// render builds the wire form of a received message. Callers hold q.mu.
func (q *queue) render(m *message, sys, names []string) receivedMessage {
	out := receivedMessage{MessageId: m.id, ReceiptHandle: receiptHandle(m.id, m.receives), MD5OfBody: m.md5, Body: m.body}
	want := func(name string) bool {
		return slices.Contains(sys, "All") || slices.Contains(sys, name)
	}
	attrs := map[string]string{}
	set := func(name, v string) {
		if v != "" && want(name) {
			attrs[name] = v
		}
	}
	set("SenderId", AccountID)
	set("SentTimestamp", strconv.FormatInt(m.sent.UnixMilli(), 10))
	set("ApproximateReceiveCount", strconv.Itoa(m.receives))
	set("ApproximateFirstReceiveTimestamp", strconv.FormatInt(m.firstReceive.UnixMilli(), 10))
	set("AWSTraceHeader", m.traceHeader)
	if q.fifo {
		set("SequenceNumber", sequenceNumber(m.seq))
		set("MessageDeduplicationId", m.dedupID)
		set("MessageGroupId", m.groupID)
	} else if m.groupID != "" {
		set("MessageGroupId", m.groupID)
	}
	if len(attrs) > 0 {
		out.Attributes = attrs
	}
	if len(names) > 0 && len(m.msgAttrs) > 0 {
		sel := map[string]messageAttribute{}
		for k, v := range m.msgAttrs {
			for _, n := range names {
				if n == "All" || n == ".*" || n == k || (strings.HasSuffix(n, ".*") && strings.HasPrefix(k, strings.TrimSuffix(n, "*"))) {
					sel[k] = v
					break
				}
			}
		}
		if len(sel) > 0 {
			out.MessageAttributes = sel
			out.MD5OfMessageAttributes, _ = attributesMD5(sel)
		}
	}
	return out
}

func (s *Server) deleteMessage(_ *http.Request, body []byte) (any, error) {
	var in struct {
		queueRef
		ReceiptHandle string
	}
	q, err := s.open(body, &in)
	if err != nil {
		return nil, err
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	return struct{}{}, q.delete(in.ReceiptHandle, s.now())
}

func (s *Server) deleteMessageBatch(_ *http.Request, body []byte) (any, error) {
	var in struct {
		queueRef
		Entries []deleteEntry
	}
	q, err := s.open(body, &in)
	if err != nil {
		return nil, err
	}
	return perEntry(q, in.Entries, func(e deleteEntry) string { return e.Id },
		func(e deleteEntry, now time.Time) error { return q.delete(e.ReceiptHandle, now) }, s.now)
}

// delete removes the message a receipt handle names. A message already
// deleted is no error. As in SQS, on a standard queue a handle from an
// earlier receive of a message received again since succeeds without
// deleting it; on a FIFO queue a handle whose visibility has ended (the
// message visible again, or received again since) has expired: the delete
// fails and the message stays.
func (q *queue) delete(handle string, now time.Time) error {
	id, gen, err := parseReceiptHandle(handle)
	if err != nil {
		return err
	}
	q.expire(now)
	m := q.byID[id]
	if m == nil {
		return nil
	}
	if q.fifo && (m.receives != gen || !m.inflight) {
		return invalid("Value %s for parameter ReceiptHandle is invalid. Reason: The receipt handle has expired.", handle)
	}
	if m.receives != gen {
		return nil
	}
	q.remove(m, now)
	return nil
}

func (s *Server) changeMessageVisibility(_ *http.Request, body []byte) (any, error) {
	var in struct {
		queueRef
		ReceiptHandle     string
		VisibilityTimeout *int
	}
	q, err := s.open(body, &in)
	if err != nil {
		return nil, err
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	return struct{}{}, q.changeVisibility(in.ReceiptHandle, in.VisibilityTimeout, s.now())
}

func (s *Server) changeMessageVisibilityBatch(_ *http.Request, body []byte) (any, error) {
	var in struct {
		queueRef
		Entries []visibilityEntry
	}
	q, err := s.open(body, &in)
	if err != nil {
		return nil, err
	}
	return perEntry(q, in.Entries, func(e visibilityEntry) string { return e.Id },
		func(e visibilityEntry, now time.Time) error {
			return q.changeVisibility(e.ReceiptHandle, e.VisibilityTimeout, now)
		}, s.now)
}

// changeVisibility sets an in-flight message's visibility timeout, counted
// from now; 0 makes it visible at once, ahead of the rest of its group.
func (q *queue) changeVisibility(handle string, timeout *int, now time.Time) error {
	if timeout == nil {
		return missing("VisibilityTimeout")
	}
	if *timeout < 0 || *timeout > 43200 {
		return invalid("Value %d for parameter VisibilityTimeout is invalid. Reason: Must be >= 0 and <= 43200.", *timeout)
	}
	id, gen, err := parseReceiptHandle(handle)
	if err != nil {
		return err
	}
	q.expire(now)
	m := q.byID[id]
	if m == nil {
		return invalid("Value %s for parameter ReceiptHandle is invalid. Reason: Message does not exist or is not available for visibility timeout change.", handle)
	}
	if m.receives != gen {
		return invalid("Value %s for parameter ReceiptHandle is invalid. Reason: The receipt handle has expired.", handle)
	}
	if !m.inflight {
		return &apiError{status: 400, code: "MessageNotInflight", query: "AWS.SimpleQueueService.MessageNotInflight;Sender",
			message: "The message referred to isn't in flight."}
	}
	// As SQS: a message's visibility ends at most 12 hours after its
	// receive; a change asking for more is refused, not cut short.
	if now.Add(time.Duration(*timeout) * time.Second).After(m.received.Add(43200 * time.Second)) {
		return invalid("Value %d for parameter VisibilityTimeout is invalid. Reason: Total VisibilityTimeout for the message is beyond the limit [43200 seconds]", *timeout)
	}
	q.release(m, time.Duration(*timeout)*time.Second, now)
	return nil
}

// Batches.

type deleteEntry struct{ Id, ReceiptHandle string }

type visibilityEntry struct {
	Id                string
	ReceiptHandle     string
	VisibilityTimeout *int
}

// perEntry runs do for each entry of a batch under the queue's lock and
// reports each entry's outcome, as SQS's batch calls do.
func perEntry[E any](q *queue, entries []E, id func(E) string, do func(E, time.Time) error, now func() time.Time) (any, error) {
	ids := make([]string, len(entries))
	for i, e := range entries {
		ids[i] = id(e)
	}
	if err := checkBatch(ids); err != nil {
		return nil, err
	}
	type ok struct{ Id string }
	out := batchResult[ok]{Successful: []ok{}, Failed: []batchFailure{}}
	q.mu.Lock()
	defer q.mu.Unlock()
	t := now()
	for _, e := range entries {
		if err := do(e, t); err != nil {
			out.fail(id(e), err)
			continue
		}
		out.Successful = append(out.Successful, ok{id(e)})
	}
	return out, nil
}

type batchFailure struct {
	Id          string
	Code        string
	Message     string
	SenderFault bool
}

type batchResult[T any] struct {
	Successful []T
	Failed     []batchFailure
}

func (b *batchResult[T]) fail(id string, err error) {
	ae, ok := err.(*apiError)
	if !ok {
		ae = &apiError{code: "InternalError", message: "internal error"}
	}
	code := ae.code
	if q, _, ok := strings.Cut(ae.query, ";"); ok {
		code = q
	}
	b.Failed = append(b.Failed, batchFailure{Id: id, Code: code, Message: ae.message, SenderFault: ae.status < 500})
}

func checkBatch(ids []string) error {
	if len(ids) == 0 {
		return &apiError{status: 400, code: "EmptyBatchRequest", query: "AWS.SimpleQueueService.EmptyBatchRequest;Sender",
			message: "There should be at least one entry in the request."}
	}
	if len(ids) > 10 {
		return &apiError{status: 400, code: "TooManyEntriesInBatchRequest", query: "AWS.SimpleQueueService.TooManyEntriesInBatchRequest;Sender",
			message: fmt.Sprintf("Maximum number of entries per request are 10. You have sent %d.", len(ids))}
	}
	seen := map[string]bool{}
	for _, id := range ids {
		if !batchIDRE.MatchString(id) {
			return &apiError{status: 400, code: "InvalidBatchEntryId", query: "AWS.SimpleQueueService.InvalidBatchEntryId;Sender",
				message: "A batch entry id can only contain alphanumeric characters, hyphens and underscores. It can be at most 80 letters long."}
		}
		if seen[id] {
			return &apiError{status: 400, code: "BatchEntryIdsNotDistinct", query: "AWS.SimpleQueueService.BatchEntryIdsNotDistinct;Sender",
				message: "Id " + id + " repeated."}
		}
		seen[id] = true
	}
	return nil
}

// Receipt handles: opaque to clients; they name the message and which
// receive of it they came from.

func receiptHandle(id string, gen int) string {
	return base64.RawURLEncoding.EncodeToString([]byte(id + "/" + strconv.Itoa(gen)))
}

func parseReceiptHandle(h string) (string, int, error) {
	bad := &apiError{status: 404, code: "ReceiptHandleIsInvalid", query: "ReceiptHandleIsInvalid;Sender", // 404: SQS's model
		message: "The input receipt handle \"" + truncate(h, 64) + "\" is not a valid receipt handle."}
	if h == "" {
		return "", 0, missing("ReceiptHandle")
	}
	raw, err := base64.RawURLEncoding.DecodeString(h)
	if err != nil {
		return "", 0, bad
	}
	id, genS, ok := strings.Cut(string(raw), "/")
	gen, err := strconv.Atoi(genS)
	if !ok || err != nil || gen < 1 {
		return "", 0, bad
	}
	return id, gen, nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// sequenceNumber renders a message's position as SQS does: a 20-digit
// decimal that grows with every message sent to the queue.
func sequenceNumber(seq uint64) string { return strconv.FormatUint(10_000_000_000_000_000_000+seq, 10) }

func md5Hex(s string) string {
	sum := md5.Sum([]byte(s))
	return hex.EncodeToString(sum[:])
}

// validBody reports whether s has only the characters SQS accepts.
func validBody(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		switch {
		case r == 0x9 || r == 0xA || r == 0xD:
		case r >= 0x20 && r <= 0xD7FF:
		case r >= 0xE000 && r <= 0xFFFD:
		case r >= 0x10000 && r <= 0x10FFFF:
		default:
			return false
		}
	}
	return true
}

func attributesSize(attrs map[string]messageAttribute) int {
	n := 0
	for k, v := range attrs {
		n += len(k) + len(v.DataType) + len(v.BinaryValue)
		if v.StringValue != nil {
			n += len(*v.StringValue)
		}
	}
	return n
}

// attributesMD5 is SQS's MD5 of message attributes: for each attribute in
// name order, the length-prefixed name, data type and value, with a
// transport byte (1 string, 2 binary) before the value.
func attributesMD5(attrs map[string]messageAttribute) (string, error) {
	if len(attrs) == 0 {
		return "", nil
	}
	if len(attrs) > 10 {
		return "", invalid("Number of message attributes [%d] exceeds the allowed maximum [10].", len(attrs))
	}
	names := make([]string, 0, len(attrs))
	for k := range attrs {
		names = append(names, k)
	}
	slices.Sort(names)
	h := md5.New()
	put := func(b []byte) {
		var n [4]byte
		binary.BigEndian.PutUint32(n[:], uint32(len(b)))
		h.Write(n[:])
		h.Write(b)
	}
	for _, k := range names {
		v := attrs[k]
		base, _, _ := strings.Cut(v.DataType, ".")
		put([]byte(k))
		put([]byte(v.DataType))
		switch base {
		case "String", "Number":
			if v.StringValue == nil {
				return "", invalid("Message attribute %s must have a StringValue.", k)
			}
			h.Write([]byte{1})
			put([]byte(*v.StringValue))
		case "Binary":
			if v.BinaryValue == nil {
				return "", invalid("Message attribute %s must have a BinaryValue.", k)
			}
			h.Write([]byte{2})
			put(v.BinaryValue)
		default:
			return "", invalid("The type of message (user) attribute '%s' is invalid. You must use only the following supported type prefixes: Binary, Number, String.", k)
		}
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
