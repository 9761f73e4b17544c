package sqsfake

import (
	"maps"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Queue attribute names and their documented limits.
var (
	queueNameRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,80}$`)
	intAttrs    = map[string][2]int{
		"VisibilityTimeout":             {0, 43200},
		"DelaySeconds":                  {0, 900},
		"MaximumMessageSize":            {1024, 1048576},
		"MessageRetentionPeriod":        {60, 1209600},
		"ReceiveMessageWaitTimeSeconds": {0, 20},
		"KmsDataKeyReusePeriodSeconds":  {60, 86400},
	}
	// Accepted and reported back, but not acted on (no dead-letter
	// redrive, no encryption, no access policy).
	passiveAttrs = map[string]bool{
		"Policy": true, "RedrivePolicy": true, "RedriveAllowPolicy": true,
		"KmsMasterKeyId": true, "SqsManagedSseEnabled": true,
	}
	fifoAttrs = map[string][]string{
		"ContentBasedDeduplication": {"true", "false"},
		"DeduplicationScope":        {"queue", "messageGroup"},
		"FifoThroughputLimit":       {"perQueue", "perMessageGroupId"},
	}
)

func defaultAttributes(fifo bool) map[string]string {
	a := map[string]string{
		"VisibilityTimeout": "30", "DelaySeconds": "0", "MaximumMessageSize": "1048576",
		"MessageRetentionPeriod": "345600", "ReceiveMessageWaitTimeSeconds": "0", "SqsManagedSseEnabled": "false",
	}
	if fifo {
		a["FifoQueue"] = "true"
		a["ContentBasedDeduplication"] = "false"
		a["DeduplicationScope"] = "queue"
		a["FifoThroughputLimit"] = "perQueue"
	}
	return a
}

// checkAttributes validates settable attributes (FifoQueue only at create).
func checkAttributes(attrs map[string]string, fifo, creating bool) error {
	for k, v := range attrs {
		switch {
		case k == "FifoQueue":
			if !creating {
				return invalid("Invalid value for the parameter FifoQueue: it can only be set when the queue is created.")
			}
			if v != "true" && v != "false" {
				return invalid("Invalid value for the parameter FifoQueue.")
			}
		case intAttrs[k] != [2]int{}:
			lim := intAttrs[k]
			n, err := strconv.Atoi(v)
			if err != nil || n < lim[0] || n > lim[1] {
				return invalid("Invalid value for the parameter %s: must be an integer from %d to %d.", k, lim[0], lim[1])
			}
		case fifoAttrs[k] != nil:
			if !fifo {
				return invalid("Invalid value for the parameter %s: only FIFO queues have it.", k)
			}
			if !slices.Contains(fifoAttrs[k], v) {
				return invalid("Invalid value for the parameter %s: one of %s.", k, strings.Join(fifoAttrs[k], ", "))
			}
		case passiveAttrs[k]:
		default:
			return &apiError{status: 400, code: "InvalidAttributeName", query: "InvalidAttributeName;Sender",
				message: "Unknown Attribute " + k + "."}
		}
	}
	return nil
}

type createQueueInput struct {
	QueueName  string
	Attributes map[string]string
	Tags       map[string]string
}

func (s *Server) createQueue(r *http.Request, body []byte) (any, error) {
	var in createQueueInput
	if err := decode(body, &in); err != nil {
		return nil, err
	}
	if in.QueueName == "" {
		return nil, missing("QueueName")
	}
	base, fifoName := strings.CutSuffix(in.QueueName, ".fifo")
	if !queueNameRE.MatchString(base) || len(in.QueueName) > 80 {
		return nil, invalid("Can only include alphanumeric characters, hyphens, or underscores. 1 to 80 in length (a FIFO queue's name ends in .fifo).")
	}
	fifo := in.Attributes["FifoQueue"] == "true"
	if fifo != fifoName {
		return nil, invalid("The name of a FIFO queue can only include alphanumeric characters, hyphens, or underscores, must end with .fifo suffix, and a queue whose name ends in .fifo must set FifoQueue=true.")
	}
	if err := checkAttributes(in.Attributes, fifo, true); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if q := s.queues[in.QueueName]; q != nil {
		if !q.sameAttributes(in.Attributes) {
			return nil, &apiError{status: 400, code: "QueueNameExists", query: "QueueAlreadyExists;Sender",
				message: "A queue already exists with the same name and a different value for attribute(s)."}
		}
		return map[string]string{"QueueUrl": queueURL(r, in.QueueName)}, nil
	}
	attrs := defaultAttributes(fifo)
	maps.Copy(attrs, in.Attributes)
	s.queues[in.QueueName] = newQueue(in.QueueName, fifo, attrs, in.Tags, s.now())
	return map[string]string{"QueueUrl": queueURL(r, in.QueueName)}, nil
}

func (s *Server) getQueueURL(r *http.Request, body []byte) (any, error) {
	var in struct{ QueueName string }
	if err := decode(body, &in); err != nil {
		return nil, err
	}
	if in.QueueName == "" {
		return nil, missing("QueueName")
	}
	s.mu.RLock()
	q := s.queues[in.QueueName]
	s.mu.RUnlock()
	if q == nil {
		return nil, noQueue()
	}
	return map[string]string{"QueueUrl": queueURL(r, q.name)}, nil
}

func (s *Server) deleteQueue(_ *http.Request, body []byte) (any, error) {
	var in queueRef
	q, err := s.open(body, &in)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	if s.queues[q.name] == q {
		delete(s.queues, q.name)
	}
	s.mu.Unlock()
	q.close()
	return struct{}{}, nil
}

func (s *Server) listQueues(r *http.Request, body []byte) (any, error) {
	var in struct {
		QueueNamePrefix string
		MaxResults      *int
		NextToken       string
	}
	if err := decode(body, &in); err != nil {
		return nil, err
	}
	if in.MaxResults != nil && (*in.MaxResults < 1 || *in.MaxResults > 1000) {
		return nil, invalid("MaxResults must be from 1 to 1000.")
	}
	s.mu.RLock()
	var names []string
	for name := range s.queues {
		if strings.HasPrefix(name, in.QueueNamePrefix) && name > in.NextToken {
			names = append(names, name)
		}
	}
	s.mu.RUnlock()
	slices.Sort(names)
	out := struct {
		QueueUrls []string `json:",omitempty"`
		NextToken string   `json:",omitempty"`
	}{}
	limit := 1000
	if in.MaxResults != nil {
		limit = *in.MaxResults
	}
	if len(names) > limit {
		names = names[:limit]
		if in.MaxResults != nil {
			out.NextToken = names[limit-1]
		}
	}
	for _, n := range names {
		out.QueueUrls = append(out.QueueUrls, queueURL(r, n))
	}
	return out, nil
}

func (s *Server) purgeQueue(_ *http.Request, body []byte) (any, error) {
	var in queueRef
	q, err := s.open(body, &in)
	if err != nil {
		return nil, err
	}
	q.purge()
	return struct{}{}, nil
}

func (s *Server) getQueueAttributes(_ *http.Request, body []byte) (any, error) {
	var in struct {
		queueRef
		AttributeNames []string
	}
	q, err := s.open(body, &in)
	if err != nil {
		return nil, err
	}
	all := q.attributes(s.now())
	out := map[string]string{}
	for _, name := range in.AttributeNames {
		if name == "All" {
			out = all
			break
		}
		v, ok := all[name]
		if !ok {
			if _, known := knownQueueAttributes[name]; !known {
				return nil, &apiError{status: 400, code: "InvalidAttributeName", query: "InvalidAttributeName;Sender",
					message: "Unknown Attribute " + name + "."}
			}
			continue
		}
		out[name] = v
	}
	return struct {
		Attributes map[string]string `json:",omitempty"`
	}{out}, nil
}

// knownQueueAttributes are names GetQueueAttributes accepts even when the
// queue has no value for them (a standard queue has no FifoQueue).
var knownQueueAttributes = map[string]struct{}{
	"FifoQueue": {}, "ContentBasedDeduplication": {}, "DeduplicationScope": {}, "FifoThroughputLimit": {},
	"Policy": {}, "RedrivePolicy": {}, "RedriveAllowPolicy": {}, "KmsMasterKeyId": {},
	"KmsDataKeyReusePeriodSeconds": {}, "SqsManagedSseEnabled": {},
}

func (s *Server) setQueueAttributes(_ *http.Request, body []byte) (any, error) {
	var in struct {
		queueRef
		Attributes map[string]string
	}
	q, err := s.open(body, &in)
	if err != nil {
		return nil, err
	}
	if err := checkAttributes(in.Attributes, q.fifo, false); err != nil {
		return nil, err
	}
	q.setAttributes(in.Attributes, s.now())
	return struct{}{}, nil
}

func (s *Server) tagQueue(_ *http.Request, body []byte) (any, error) {
	var in struct {
		queueRef
		Tags map[string]string
	}
	q, err := s.open(body, &in)
	if err != nil {
		return nil, err
	}
	q.mu.Lock()
	maps.Copy(q.tags, in.Tags)
	q.mu.Unlock()
	return struct{}{}, nil
}

func (s *Server) untagQueue(_ *http.Request, body []byte) (any, error) {
	var in struct {
		queueRef
		TagKeys []string
	}
	q, err := s.open(body, &in)
	if err != nil {
		return nil, err
	}
	q.mu.Lock()
	for _, k := range in.TagKeys {
		delete(q.tags, k)
	}
	q.mu.Unlock()
	return struct{}{}, nil
}

func (s *Server) listQueueTags(_ *http.Request, body []byte) (any, error) {
	var in queueRef
	q, err := s.open(body, &in)
	if err != nil {
		return nil, err
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	return struct {
		Tags map[string]string `json:",omitempty"`
	}{maps.Clone(q.tags)}, nil
}

func epochSeconds(t time.Time) string { return strconv.FormatInt(t.Unix(), 10) }
