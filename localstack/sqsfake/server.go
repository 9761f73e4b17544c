// Package sqsfake is an in-memory stand-in for Amazon SQS that speaks the
// AWS JSON 1.0 protocol of the current AWS SDKs, for local development and
// tests (in the way cloud.google.com/go/pubsub/pstest and miniredis serve
// their ecosystems).
//
// It follows the SQS documentation wherever an application relies on a
// behaviour: long polls return as soon as one message is available; FIFO
// queues deliver a group in send order, hold a group while one of its
// messages is in flight, bring a message made visible again back before the
// rest of its group, number messages with increasing SequenceNumbers and
// deduplicate by MessageDeduplicationId (or content) for five minutes, also
// after a delete. Visibility timeouts, receive counts, batch calls, queue
// attributes and the JSON protocol's error shapes are as SQS documents them,
// and no malformed request stops the server.
//
// Everything is in memory: a restarted stand-in starts with no queues.
//
//	srv := sqsfake.New()
//	ts := httptest.NewUnstartedServer(srv.Handler())
//	ts.Config.ConnContext = sqsfake.ConnContext // see ConnContext
//	ts.Start()
//	defer ts.Close()
//	// point the SDK at ts.URL (sqs.Options.BaseEndpoint or AWS_ENDPOINT_URL_SQS)
package sqsfake

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// AccountID is the account id that appears in queue URLs and ARNs.
const AccountID = "000000000000"

// Region appears in queue ARNs.
const Region = "us-east-1"

// maxRequestBytes bounds one request body: ten messages of the largest
// allowed size plus room for their attributes.
const maxRequestBytes = 11 << 20

// Options configure a Server. The zero value is ready to use.
type Options struct {
	// Now is the clock (time.Now when nil). Tests may set a clock they move
	// forward to observe time-based behaviour such as the deduplication
	// window; a long poll's own wait always counts real time.
	Now func() time.Time
	// Logger receives one debug line per failed request (discarded when nil).
	Logger *slog.Logger
}

// Server is an in-memory SQS. Its methods are safe for concurrent use.
type Server struct {
	now    func() time.Time
	log    *slog.Logger
	mu     sync.RWMutex
	queues map[string]*queue // by name
}

// New returns an empty Server.
func New(opts ...Options) *Server {
	var o Options
	if len(opts) > 0 {
		o = opts[0]
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return &Server{now: o.Now, log: o.Logger, queues: make(map[string]*queue)}
}

// Handler serves the SQS JSON 1.0 protocol: POST with X-Amz-Target
// "AmazonSQS.<Operation>". Any path is accepted, as SQS accepts both the
// service root and a queue URL.
func (s *Server) Handler() http.Handler {
	return http.HandlerFunc(s.serveHTTP)
}

type operation func(s *Server, r *http.Request, body []byte) (any, error)

var operations = map[string]operation{
	"CreateQueue":                  (*Server).createQueue,
	"GetQueueUrl":                  (*Server).getQueueURL,
	"DeleteQueue":                  (*Server).deleteQueue,
	"ListQueues":                   (*Server).listQueues,
	"PurgeQueue":                   (*Server).purgeQueue,
	"GetQueueAttributes":           (*Server).getQueueAttributes,
	"SetQueueAttributes":           (*Server).setQueueAttributes,
	"TagQueue":                     (*Server).tagQueue,
	"UntagQueue":                   (*Server).untagQueue,
	"ListQueueTags":                (*Server).listQueueTags,
	"SendMessage":                  (*Server).sendMessage,
	"SendMessageBatch":             (*Server).sendMessageBatch,
	"ReceiveMessage":               (*Server).receiveMessage,
	"DeleteMessage":                (*Server).deleteMessage,
	"DeleteMessageBatch":           (*Server).deleteMessageBatch,
	"ChangeMessageVisibility":      (*Server).changeMessageVisibility,
	"ChangeMessageVisibilityBatch": (*Server).changeMessageVisibilityBatch,
}

func (s *Server) serveHTTP(w http.ResponseWriter, r *http.Request) {
	defer func() {
		// A bug must cost one request, never the server.
		if p := recover(); p != nil {
			s.log.Error("sqsfake: panic serving request", "panic", p)
			writeError(w, &apiError{status: 500, code: "InternalError", query: "InternalError;Receiver",
				message: "internal error"})
		}
	}()
	if r.Method != http.MethodPost {
		writeError(w, &apiError{status: 405, code: "UnsupportedOperation", query: "AWS.SimpleQueueService.UnsupportedOperation;Sender",
			message: "only POST with the AWS JSON 1.0 protocol is supported"})
		return
	}
	target := r.Header.Get("X-Amz-Target")
	name, ok := strings.CutPrefix(target, "AmazonSQS.")
	op := operations[name]
	if !ok || op == nil {
		writeError(w, &apiError{status: 400, code: "UnknownOperationException", namespace: "com.amazon.coral.service",
			message: fmt.Sprintf("unknown or missing X-Amz-Target %q (this endpoint speaks the AWS JSON 1.0 protocol)", target)})
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxRequestBytes))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			writeError(w, &apiError{status: 413, code: "RequestEntityTooLarge", query: "RequestEntityTooLarge;Sender",
				message: "request body too large"})
			return
		}
		writeError(w, invalid("could not read the request body"))
		return
	}
	out, err := op(s, r, body)
	if err != nil {
		var ae *apiError
		if !errors.As(err, &ae) {
			ae = &apiError{status: 500, code: "InternalError", query: "InternalError;Receiver", message: "internal error"}
			s.log.Error("sqsfake: internal error", "op", name, "err", err)
		}
		s.log.Debug("sqsfake: request failed", "op", name, "code", ae.code, "message", ae.message)
		writeError(w, ae)
		return
	}
	b, err := json.Marshal(out)
	if err != nil {
		writeError(w, &apiError{status: 500, code: "InternalError", query: "InternalError;Receiver", message: "internal error"})
		return
	}
	// A whole body with its length, as SQS answers: no chunked encoding for
	// the client to wait on after the JSON.
	w.Header().Set("Content-Type", "application/x-amz-json-1.0")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.Header().Set("X-Amzn-Requestid", newID())
	if _, err := w.Write(b); err != nil {
		// For a receive, its messages are now in flight with no one to
		// handle them: they come back when their visibility timeout ends.
		s.log.Warn("sqsfake: could not write the answer; the client has gone", "op", name, "err", err)
	}
}

// apiError is an SQS error as the JSON protocol carries it.
type apiError struct {
	status    int
	namespace string // default com.amazonaws.sqs
	code      string // the shape name, e.g. QueueDoesNotExist
	query     string // x-amzn-query-error, e.g. AWS.SimpleQueueService.NonExistentQueue;Sender
	message   string
}

func (e *apiError) Error() string { return e.code + ": " + e.message }

func writeError(w http.ResponseWriter, e *apiError) {
	ns := e.namespace
	if ns == "" {
		ns = "com.amazonaws.sqs"
	}
	w.Header().Set("Content-Type", "application/x-amz-json-1.0")
	w.Header().Set("X-Amzn-Requestid", newID())
	if e.query != "" {
		w.Header().Set("X-Amzn-Query-Error", e.query)
	}
	w.WriteHeader(e.status)
	_ = json.NewEncoder(w).Encode(map[string]string{"__type": ns + "#" + e.code, "message": e.message})
}

func invalid(format string, args ...any) *apiError {
	return &apiError{status: 400, code: "InvalidParameterValue", query: "InvalidParameterValue;Sender",
		message: fmt.Sprintf(format, args...)}
}

func missing(param string) *apiError {
	return &apiError{status: 400, code: "MissingParameter", query: "MissingParameter;Sender",
		message: "The request must contain the parameter " + param + "."}
}

func noQueue() *apiError {
	return &apiError{status: 400, code: "QueueDoesNotExist", query: "AWS.SimpleQueueService.NonExistentQueue;Sender",
		message: "The specified queue does not exist."}
}

func decode(body []byte, v any) error {
	if len(body) == 0 {
		body = []byte("{}")
	}
	if err := json.Unmarshal(body, v); err != nil {
		return &apiError{status: 400, code: "SerializationException", namespace: "com.amazon.coral.service",
			message: "the request body is not valid JSON for this operation: " + err.Error()}
	}
	return nil
}

func newID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	h := hex.EncodeToString(b[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// queueURL is the URL of queue name as seen by the client that asked.
func queueURL(r *http.Request, name string) string {
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	host := r.Host
	if host == "" {
		host = "localhost"
	}
	return scheme + "://" + host + "/" + AccountID + "/" + name
}

// queueRef is the QueueUrl every queue operation's input carries.
type queueRef struct{ QueueUrl string }

func (r *queueRef) queueURL() string { return r.QueueUrl }

// open decodes a request whose input names a queue and finds that queue.
func (s *Server) open(body []byte, in interface{ queueURL() string }) (*queue, error) {
	if err := decode(body, in); err != nil {
		return nil, err
	}
	return s.lookup(in.queueURL())
}

// lookup finds the queue a QueueUrl names. Only the last path segment
// counts, so a URL stays valid whatever host name the client used.
func (s *Server) lookup(url string) (*queue, error) {
	if url == "" {
		return nil, missing("QueueUrl")
	}
	name := url[strings.LastIndexByte(url, '/')+1:]
	s.mu.RLock()
	q := s.queues[name]
	s.mu.RUnlock()
	if q == nil {
		return nil, noQueue()
	}
	return q, nil
}
