package api

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/dispatchhq/dispatch"
)

// answers holds the buffers answers are encoded into, so that an answer
// is not marshalled into a fresh slice and then copied to the connection
// (gin's c.JSON): a batch's 100 job views are 60 KB.
var answers = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// maxPooledAnswer is the largest buffer kept for the next answer: a
// page of events with large payloads is not held on to.
const maxPooledAnswer = 256 << 10

// noStore keeps an answer that carries a secret (a signing secret shown
// once, a session's CSRF token) out of every cache, a browser's or a
// proxy's.
func noStore(c *gin.Context) {
	c.Header("Cache-Control", "no-store")
}

// writeJSON answers with v as JSON, as gin's c.JSON does (the same bytes
// and Content-Type), with its length: a large answer is not chunked.
func writeJSON(c *gin.Context, status int, v any) {
	buf := answers.Get().(*bytes.Buffer)
	defer func() {
		if buf.Cap() <= maxPooledAnswer {
			buf.Reset()
			answers.Put(buf)
		}
	}()
	if err := json.NewEncoder(buf).Encode(v); err != nil {
		// A view that cannot be encoded is a bug: the recoverer logs it
		// and answers 500 (c.JSON answered the status with no body).
		panic(err)
	}
	b := bytes.TrimSuffix(buf.Bytes(), []byte("\n")) // Encode's newline; Marshal has none
	h := c.Writer.Header()
	h.Set("Content-Type", "application/json; charset=utf-8")
	h.Set("Content-Length", strconv.Itoa(len(b)))
	c.Status(status)
	_, _ = c.Writer.Write(b) // a client gone away is the connection's to notice
}

// timeLayout is RFC 3339 in UTC with milliseconds.
const timeLayout = "2006-01-02T15:04:05.000Z07:00"

func fmtTime(t time.Time) string { return t.UTC().Format(timeLayout) }

func fmtTimePtr(t *time.Time) *string {
	if t == nil {
		return nil
	}
	s := fmtTime(*t)
	return &s
}

func idOrEmpty(id int64) string {
	if id == 0 {
		return ""
	}
	return dispatch.FormatID(id)
}

type jobView struct {
	ID                 string            `json:"id"`
	ExternalID         string            `json:"externalId,omitempty"`
	Source             string            `json:"source"`
	Type               string            `json:"type"`
	GroupID            string            `json:"groupId,omitempty"`
	Metadata           map[string]string `json:"metadata"`
	TargetURL          string            `json:"targetUrl"`
	Protocol           string            `json:"protocol"`
	Headers            map[string]string `json:"headers"`
	Payload            string            `json:"payload"`
	PayloadContentType string            `json:"payloadContentType"`
	CredentialsID      string            `json:"credentialsId,omitempty"`
	Status             dispatch.Status   `json:"status"`
	MaxRetries         int               `json:"maxRetries"`
	RetryStrategy      string            `json:"retryStrategy"`
	ScheduledFor       *string           `json:"scheduledFor,omitempty"`
	ExpiresAt          *string           `json:"expiresAt,omitempty"`
	AttemptCount       int               `json:"attemptCount"`
	LastAttemptAt      *string           `json:"lastAttemptAt,omitempty"`
	NextAttemptAt      *string           `json:"nextAttemptAt,omitempty"`
	CompletedAt        *string           `json:"completedAt,omitempty"`
	DurationMillis     *int64            `json:"durationMillis,omitempty"`
	LastError          string            `json:"lastError,omitempty"`
	IdempotencyKey     string            `json:"idempotencyKey,omitempty"`
	ReplayOf           string            `json:"replayOf,omitempty"`
	EventID            string            `json:"eventId,omitempty"`
	SubscriptionID     string            `json:"subscriptionId,omitempty"`
	QueueURL           string            `json:"queueUrl,omitempty"`
	PoolCode           string            `json:"poolCode,omitempty"`
	CreatedAt          string            `json:"createdAt"`
	UpdatedAt          string            `json:"updatedAt"`
}

func viewJob(j dispatch.Job) jobView {
	v := jobView{
		ID: dispatch.FormatID(j.ID), ExternalID: j.ExternalID, Source: j.Source, Type: j.Type,
		GroupID: j.GroupID, Metadata: j.Metadata, TargetURL: j.TargetURL, Protocol: j.Protocol,
		Headers: j.Headers, Payload: j.Payload, PayloadContentType: j.PayloadContentType,
		CredentialsID: idOrEmpty(j.CredentialsID), Status: j.Status, MaxRetries: j.MaxRetries,
		RetryStrategy: string(j.RetryStrategy), ScheduledFor: fmtTimePtr(j.ScheduledFor),
		ExpiresAt: fmtTimePtr(j.ExpiresAt), AttemptCount: j.AttemptCount,
		LastAttemptAt: fmtTimePtr(j.LastAttemptAt), CompletedAt: fmtTimePtr(j.CompletedAt),
		DurationMillis: j.DurationMillis, LastError: j.LastError, IdempotencyKey: j.IdempotencyKey,
		ReplayOf: idOrEmpty(j.ReplayOf), EventID: idOrEmpty(j.EventID), SubscriptionID: idOrEmpty(j.SubscriptionID), CreatedAt: fmtTime(j.CreatedAt), UpdatedAt: fmtTime(j.UpdatedAt),
		QueueURL: j.QueueURL, PoolCode: j.PoolCode,
	}
	if j.TargetIsSecret() {
		// An alert to a Slack incoming webhook: its URL is the secret that
		// posts to the channel, and only admins read alert destinations.
		v.TargetURL = dispatch.ShowHost(j.TargetURL)
	}
	if j.Status == dispatch.StatusFailed || j.Status == dispatch.StatusPending {
		v.NextAttemptAt = fmtTimePtr(j.NextAttemptAt)
	}
	if v.Metadata == nil {
		v.Metadata = map[string]string{}
	}
	if v.Headers == nil {
		v.Headers = map[string]string{}
	}
	return v
}

type attemptView struct {
	ID             string                 `json:"id"`
	JobID          string                 `json:"jobId"`
	AttemptNumber  int                    `json:"attemptNumber"`
	Status         dispatch.AttemptStatus `json:"status"`
	ResponseCode   *int                   `json:"responseCode,omitempty"`
	ResponseBody   string                 `json:"responseBody,omitempty"`
	ErrorMessage   string                 `json:"errorMessage,omitempty"`
	DurationMillis int64                  `json:"durationMillis"`
	AttemptedAt    string                 `json:"attemptedAt"`
	CompletedAt    string                 `json:"completedAt"`
	// The headers sent (secrets redacted) and received; absent when no
	// request was made or no response came, and on attempts recorded
	// before headers were kept.
	RequestHeaders  map[string]string `json:"requestHeaders,omitempty"`
	ResponseHeaders map[string]string `json:"responseHeaders,omitempty"`
}

func viewAttempt(a dispatch.Attempt) attemptView {
	v := attemptView{
		ID: dispatch.FormatID(a.ID), JobID: dispatch.FormatID(a.JobID), AttemptNumber: a.AttemptNumber,
		Status: a.Status, ResponseBody: a.ResponseBody, ErrorMessage: a.ErrorMessage,
		DurationMillis: a.DurationMillis, AttemptedAt: fmtTime(a.AttemptedAt), CompletedAt: fmtTime(a.CompletedAt),
		RequestHeaders: a.RequestHeaders, ResponseHeaders: a.ResponseHeaders,
	}
	if a.ResponseCode != 0 {
		code := a.ResponseCode
		v.ResponseCode = &code
	}
	return v
}

// credentialsView never carries a secret; createdSecret is set only on the
// response that created or rotated the secret, the one time it is shown.
type credentialsView struct {
	ID                      string  `json:"id"`
	Name                    string  `json:"name"`
	Algorithm               string  `json:"algorithm"`
	SignatureScheme         string  `json:"signatureScheme"`
	HasBearerToken          bool    `json:"hasBearerToken"`
	PreviousSecretExpiresAt *string `json:"previousSecretExpiresAt,omitempty"` // when the last old secret ends
	// PreviousSecretsExpireAt lists each old secret still valid, newest first.
	PreviousSecretsExpireAt []string `json:"previousSecretsExpireAt,omitempty"`
	AllowedTargets          []string `json:"allowedTargets"` // origins, with optional path prefixes; empty: nowhere
	CreatedAt               string   `json:"createdAt"`
	UpdatedAt               string   `json:"updatedAt"`
	SigningSecret           string   `json:"signingSecret,omitempty"`
	// Usage is on reads (the list and GET), not on changes.
	Usage *credentialsUsageView `json:"usage,omitempty"`
}

// credentialsUsageView is where credentials are used.
type credentialsUsageView struct {
	Subscriptions     int  `json:"subscriptions"`
	LiveJobs          int  `json:"liveJobs"`
	LiveJobsExact     bool `json:"liveJobsExact"`
	AlertDestinations int  `json:"alertDestinations"`
}

func viewCredentialsUsage(u dispatch.CredentialsUsage) *credentialsUsageView {
	return &credentialsUsageView{Subscriptions: u.Subscriptions, LiveJobs: min(u.LiveJobs, dispatch.CountLimit),
		LiveJobsExact: u.LiveJobs <= dispatch.CountLimit, AlertDestinations: u.AlertDestinations}
}

func viewCredentials(c dispatch.CredentialsInfo, now time.Time) credentialsView {
	v := credentialsView{
		ID: dispatch.FormatID(c.ID), Name: c.Name, Algorithm: c.Algorithm, SignatureScheme: c.SignatureScheme,
		HasBearerToken: c.HasBearerToken, CreatedAt: fmtTime(c.CreatedAt), UpdatedAt: fmtTime(c.UpdatedAt),
		AllowedTargets: c.AllowedTargets,
	}
	if v.AllowedTargets == nil {
		v.AllowedTargets = []string{}
	}
	var last time.Time
	for _, end := range c.PreviousExpires {
		if now.Before(end) {
			v.PreviousSecretsExpireAt = append(v.PreviousSecretsExpireAt, fmtTime(end))
			if end.After(last) {
				last = end
			}
		}
	}
	if !last.IsZero() {
		v.PreviousSecretExpiresAt = fmtTimePtr(&last)
	}
	return v
}

// replayFailureView is one job a redrive could not replay, with why.
type replayFailureView struct {
	ID    string      `json:"id"`
	Error errorDetail `json:"error"`
}

func viewReplayFailure(f dispatch.ReplayFailure) replayFailureView {
	v := replayFailureView{ID: dispatch.FormatID(f.JobID), Error: errorDetail{Code: dispatch.EInternal, Message: "internal error"}}
	if de, ok := f.Err.(*dispatch.Error); ok {
		v.Error = errorDetail{Code: de.Code, Message: de.Message}
	}
	return v
}

type subscriptionView struct {
	ID                 string                      `json:"id"`
	Name               string                      `json:"name"`
	URL                string                      `json:"url"`
	EventTypes         []string                    `json:"eventTypes"`
	Filter             map[string]string           `json:"filter"`
	CredentialsID      string                      `json:"credentialsId,omitempty"`
	Headers            map[string]string           `json:"headers"`
	MaxRetries         int                         `json:"maxRetries"`
	RetryStrategy      string                      `json:"retryStrategy"`
	OrderingKey        string                      `json:"orderingKey,omitempty"`
	RateLimitPerSecond int                         `json:"rateLimitPerSecond,omitempty"`
	Status             dispatch.SubscriptionStatus `json:"status"`
	DisabledReason     string                      `json:"disabledReason,omitempty"`
	VerifyRequired     bool                        `json:"verifyRequired"`
	VerifiedURL        string                      `json:"verifiedUrl,omitempty"`
	QueueURL           string                      `json:"queueUrl,omitempty"`
	PoolCode           string                      `json:"poolCode,omitempty"`
	CreatedAt          string                      `json:"createdAt"`
	UpdatedAt          string                      `json:"updatedAt"`
	// Health is on reads (the list and GET), not on changes.
	Health *subscriptionHealthView `json:"health,omitempty"`
}

// subscriptionHealthView is how a subscription's deliveries have gone
// lately (dispatch.SubscriptionHealth).
type subscriptionHealthView struct {
	RecentJobs      int      `json:"recentJobs"`
	RecentCompleted int      `json:"recentCompleted"`
	SuccessRate     *float64 `json:"successRate"`
	LastSuccessAt   *string  `json:"lastSuccessAt"`
	LastFailureAt   *string  `json:"lastFailureAt"`
	LastError       string   `json:"lastError,omitempty"`
}

func viewSubscriptionHealth(h dispatch.SubscriptionHealth) *subscriptionHealthView {
	v := &subscriptionHealthView{RecentJobs: h.Finished, RecentCompleted: h.Completed,
		LastSuccessAt: fmtTimePtr(h.LastSuccess), LastFailureAt: fmtTimePtr(h.LastFailure), LastError: h.LastError}
	if h.Finished > 0 {
		rate := float64(h.Completed) / float64(h.Finished)
		v.SuccessRate = &rate
	}
	return v
}

func viewSubscription(s dispatch.Subscription) subscriptionView {
	v := subscriptionView{
		ID: dispatch.FormatID(s.ID), Name: s.Name, URL: s.URL, EventTypes: s.EventTypes, Filter: s.Filter,
		CredentialsID: idOrEmpty(s.CredentialsID), Headers: s.Headers, MaxRetries: s.MaxRetries,
		RetryStrategy: string(s.RetryStrategy), OrderingKey: s.OrderingKey, RateLimitPerSecond: s.RateLimitPerSecond,
		Status: s.Status, DisabledReason: s.DisabledReason, VerifyRequired: s.VerifyRequired, VerifiedURL: s.VerifiedURL,
		QueueURL: s.QueueURL, PoolCode: s.PoolCode,
		CreatedAt: fmtTime(s.CreatedAt), UpdatedAt: fmtTime(s.UpdatedAt),
	}
	if v.Filter == nil {
		v.Filter = map[string]string{}
	}
	if v.Headers == nil {
		v.Headers = map[string]string{}
	}
	if v.EventTypes == nil {
		v.EventTypes = []string{}
	}
	return v
}

type eventJobView struct {
	ID             string          `json:"id"`
	SubscriptionID string          `json:"subscriptionId"`
	Status         dispatch.Status `json:"status"`
}

// eventView carries data as the JSON value it was published as; search
// results are eventViews (read the event for its jobs).
type eventView struct {
	ID             string            `json:"id"`
	Source         string            `json:"source"`
	Type           string            `json:"type"`
	Data           json.RawMessage   `json:"data"`
	Metadata       map[string]string `json:"metadata"`
	IdempotencyKey string            `json:"idempotencyKey,omitempty"`
	CreatedAt      string            `json:"createdAt"`
}

// eventWithJobsView is a published or read event: jobs is always present,
// [] when no subscription matched.
type eventWithJobsView struct {
	eventView
	Jobs []eventJobView `json:"jobs"`
}

func viewEvent(e dispatch.Event) eventView {
	v := eventView{
		ID: dispatch.FormatID(e.ID), Source: e.Source, Type: e.Type, Data: json.RawMessage(e.Data),
		Metadata: e.Metadata, IdempotencyKey: e.IdempotencyKey, CreatedAt: fmtTime(e.CreatedAt),
	}
	if v.Metadata == nil {
		v.Metadata = map[string]string{}
	}
	return v
}

func viewEventWithJobs(e dispatch.Event) eventWithJobsView {
	v := eventWithJobsView{eventView: viewEvent(e), Jobs: make([]eventJobView, len(e.Jobs))}
	for i, j := range e.Jobs {
		v.Jobs[i] = eventJobView{ID: dispatch.FormatID(j.ID), SubscriptionID: dispatch.FormatID(j.SubscriptionID), Status: j.Status}
	}
	return v
}

func sortedParams(q url.Values) []string {
	keys := make([]string, 0, len(q))
	for k := range q {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// pageView is a list response: one page of items, newest first; the
// total, exact up to dispatch.CountLimit and "at least" past it; and, for
// lists read by keyset, the cursor of the next page.
type pageView[T any] struct {
	Items      []T    `json:"items"`
	Page       int    `json:"page"`
	Size       int    `json:"size"`
	TotalItems int    `json:"totalItems"`
	TotalPages int    `json:"totalPages"`
	TotalExact bool   `json:"totalExact"`
	NextBefore string `json:"nextBefore,omitempty"`
}

// writePage answers with one page of items. total above CountLimit means
// "more than CountLimit"; withCursor adds nextBefore (the last item's id)
// when the page is full, for the lists that page by keyset.
func writePage[T any](c *gin.Context, items []T, page, size, total int, lastID int64, withCursor bool) {
	v := pageView[T]{Items: items, Page: page, Size: size, TotalItems: min(total, dispatch.CountLimit),
		TotalExact: total <= dispatch.CountLimit}
	v.TotalPages = (v.TotalItems + size - 1) / size
	if withCursor && len(items) == size && lastID > 0 {
		v.NextBefore = dispatch.FormatID(lastID)
	}
	writeJSON(c, http.StatusOK, v)
}

// checkDepth refuses pages that end past dispatch.CountLimit items: deeper
// pages are read by keyset (before=nextBefore), which costs the same at
// any depth, not by an offset that reads every row before the page.
func checkDepth(p *dispatch.Problems, page, size int) {
	if (page+1)*size > dispatch.CountLimit {
		p.Add("page", "pages past the first %d items are read with before=<nextBefore of the page before>, not page", dispatch.CountLimit)
	}
}

// cursorParam reads before, a job or event id (0 when absent).
func cursorParam(q url.Values, p *dispatch.Problems) int64 {
	v := q.Get("before")
	if v == "" {
		return 0
	}
	id, ok := dispatch.ParseID(v)
	if !ok {
		p.Add("before", "must be an id, as nextBefore gives it")
	}
	return id
}
