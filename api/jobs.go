package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/gin-gonic/gin"
	"go.opentelemetry.io/otel/trace"

	"github.com/dispatchhq/dispatch"
	"github.com/dispatchhq/dispatch/api/decode"
)

const (
	maxBatch         = 100
	defaultPageSize  = 20
	maxPageSize      = 100
	defaultReplayMax = 100
	maxReplay        = 1000
)

func (s *Server) createJob(c *gin.Context) {
	b := body(c)
	j, err := decode.CreateJob(b, s.cfg.JobRules, s.now())
	if err != nil {
		s.refuseCreate(c, err, decode.CredentialsID(b))
		return
	}
	span := s.startCreate(c.Request.Context(), j)
	out, created, err := s.store.CreateJob(c.Request.Context(), j)
	endCreate(span, out, created, err)
	if err != nil {
		s.refuseCreate(c, err, 0) // the store has checked the credentials
		return
	}
	if !created {
		writeJSON(c, http.StatusOK, viewJob(out))
		return
	}
	s.metrics.jobsCreated.Inc()
	writeJSON(c, http.StatusCreated, viewJob(out))
}

// refuseCreate answers a create refused for its body with err, unless its
// idempotency key is held by a job already: a retry of a create that was
// stored may no longer pass (its expiresAt has passed, its credentials were
// deleted), and is answered as any repeat of the key is, 200 with that job.
// Otherwise the answer names too the body's credentials (creds) when they
// do not exist (withMissingCredentials).
func (s *Server) refuseCreate(c *gin.Context, err error, creds int64) {
	if code := dispatch.ErrorCode(err); code == dispatch.EInvalid || code == dispatch.EUnprocessable {
		if key := decode.IdempotencyKey(body(c)); key != "" {
			if j, ok, kerr := s.store.JobByKey(c.Request.Context(), key); kerr == nil && ok {
				writeJSON(c, http.StatusOK, viewJob(j))
				return
			}
		}
	}
	s.writeError(c, s.withMissingCredentials(c.Request.Context(), err, creds))
}

// withMissingCredentials adds to err, the problems of a body refused before
// the store saw it, that the credentials creds it names do not exist (0:
// it names none, or none that parses). The store checks the credentials
// only of a body that passes: without this, a body with another bad field
// too was refused twice, credentialsId named only the second time. Any
// other error, credentials that exist or cannot be read now, and problems
// past dispatch.MaxDetails (no more are listed) leave err as it is.
func (s *Server) withMissingCredentials(ctx context.Context, err error, creds int64) error {
	var de *dispatch.Error
	if creds == 0 || !errors.As(err, &de) || de.Code != dispatch.EInvalid || len(de.Details) >= dispatch.MaxDetails {
		return err
	}
	if _, gerr := s.store.GetCredentials(ctx, creds); dispatch.ErrorCode(gerr) != dispatch.ENotFound {
		return err
	}
	all := *de
	all.Details = append(slices.Clone(de.Details), dispatch.FieldError{Field: "credentialsId",
		Message: fmt.Sprintf("credentials %d do not exist", creds)})
	return &all
}

// withItemProblems adds to a batch's refusal (credentials that do not
// exist, 400, or that may not be sent to an item's target, 422, refuse the
// whole batch) the problems of the items refused on their own, so that one
// answer names every one. Any other error is returned as it is.
func withItemProblems(err error, errs []error) error {
	var refused *dispatch.Error
	if !errors.As(err, &refused) || (refused.Code != dispatch.EUnprocessable && refused.Code != dispatch.EInvalid) {
		return err
	}
	all := *refused
	details := dispatch.Problems(slices.Clone(refused.Details))
	for i, e := range errs {
		if de, ok := e.(*dispatch.Error); ok {
			details.AddItem(i, de)
		}
	}
	all.Details = details.Capped()
	return &all
}

type batchResult struct {
	Index  int          `json:"index"`
	Status int          `json:"status"`
	Job    *jobView     `json:"job,omitempty"`
	Error  *errorDetail `json:"error,omitempty"`
}

// createJobs creates the valid items of a batch in one transaction and
// answers per item: 201 created, 200 idempotent repeat, 400 invalid.
func (s *Server) createJobs(c *gin.Context) {
	jobs, errs, err := decode.CreateJobs(body(c), s.cfg.JobRules, s.now(), maxBatch)
	if err != nil {
		s.writeError(c, err)
		return
	}
	var creds []int64 // each item's credentials, read again once one is refused
	results := make([]batchResult, len(jobs))
	valid := 0
	for i := range jobs {
		results[i].Index = i
		if errs[i] != nil {
			jobs[i] = nil // the store skips it and keeps the others' indices
			if creds == nil {
				creds = decode.ItemCredentialsIDs(body(c))
			}
			if i < len(creds) {
				errs[i] = s.withMissingCredentials(c.Request.Context(), errs[i], creds[i])
			}
			de := errs[i].(*dispatch.Error)
			results[i].Status = http.StatusBadRequest
			results[i].Error = &errorDetail{Code: de.Code, Message: de.Message, Details: de.Details}
			continue
		}
		valid++
	}
	if valid > 0 {
		var spans []trace.Span
		if s.cfg.Tracer.Enabled() {
			spans = make([]trace.Span, len(jobs))
			for i, j := range jobs {
				spans[i] = s.startCreate(c.Request.Context(), j)
			}
		}
		out, created, err := s.store.CreateJobs(c.Request.Context(), jobs)
		for i, span := range spans {
			if err != nil {
				endCreate(span, dispatch.Job{}, false, err)
			} else {
				endCreate(span, out[i], created[i], nil)
			}
		}
		if err != nil {
			s.writeError(c, withItemProblems(err, errs))
			return
		}
		n := 0
		views := make([]jobView, len(jobs)) // one allocation, not one a job
		for i := range jobs {
			if jobs[i] == nil {
				continue
			}
			views[i] = viewJob(out[i])
			results[i].Job, results[i].Status = &views[i], http.StatusOK
			if created[i] {
				results[i].Status = http.StatusCreated
				n++
			}
		}
		s.metrics.jobsCreated.Add(float64(n))
	}
	writeJSON(c, http.StatusOK, gin.H{"results": results})
}

func (s *Server) searchJobs(c *gin.Context) {
	f, page, size, err := parseSearch(c.Request.URL.Query(), "page", "size", "before")
	if err != nil {
		s.writeError(c, err)
		return
	}
	jobs, total, err := s.store.SearchJobs(c.Request.Context(), f, page, size)
	if err != nil {
		s.writeError(c, err)
		return
	}
	items := make([]jobView, len(jobs))
	var last int64
	for i, j := range jobs {
		items[i], last = viewJob(j), j.ID
	}
	writePage(c, items, page, size, total, last, true)
}

// parseSearch reads the search filters and reports every bad one.
// extra names the paging parameters the caller accepts.
func parseSearch(q url.Values, extra ...string) (dispatch.JobFilter, int, int, error) {
	var (
		f    dispatch.JobFilter
		p    dispatch.Problems
		page = 0
		size = defaultPageSize
	)
	known := map[string]bool{"status": true, "source": true, "type": true, "groupId": true, "createdAfter": true, "createdBefore": true}
	for _, e := range extra {
		known[e] = true
	}
	for key, vals := range q {
		if mk, ok := strings.CutPrefix(key, "metadata."); ok {
			if mk == "" || utf8.RuneCountInString(mk) > dispatch.MaxMetadataKeyLen { // characters, as a create counts them
				p.Add(key, "metadata keys must be 1 to %d characters", dispatch.MaxMetadataKeyLen)
				continue
			}
			if len(vals) > 1 {
				p.Add(key, "must be given once")
				continue
			}
			if f.Metadata == nil {
				f.Metadata = map[string]string{}
			}
			f.Metadata[mk] = vals[0]
			continue
		}
		if !known[key] {
			p.Add(key, "unknown query parameter")
			continue
		}
		if len(vals) > 1 && key != "status" {
			p.Add(key, "must be given once")
		}
	}
	for _, raw := range q["status"] {
		for _, st := range strings.Split(raw, ",") {
			status := dispatch.Status(strings.ToUpper(strings.TrimSpace(st)))
			if !status.Valid() {
				p.Add("status", "%q is not a status (PENDING, IN_PROGRESS, COMPLETED, FAILED, ERROR, CANCELLED, EXPIRED)", st)
				continue
			}
			f.Statuses = append(f.Statuses, status)
		}
	}
	f.Source, f.Type, f.GroupID = q.Get("source"), q.Get("type"), q.Get("groupId")
	for name, dst := range map[string]**time.Time{"createdAfter": &f.CreatedAfter, "createdBefore": &f.CreatedBefore} {
		if v := q.Get(name); v != "" {
			t, err := time.Parse(time.RFC3339Nano, v)
			if err != nil {
				p.Add(name, "must be an RFC 3339 time such as 2025-10-04T15:00:00Z")
				continue
			}
			*dst = &t
		}
	}
	intParam := func(name string, def, min, max int) int {
		v := q.Get(name)
		if v == "" {
			return def
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < min || n > max {
			p.Add(name, "must be a whole number from %d to %d", min, max)
			return def
		}
		return n
	}
	if known["page"] {
		page = intParam("page", 0, 0, 1_000_000)
		size = intParam("size", defaultPageSize, 1, maxPageSize)
		checkDepth(&p, page, size)
	}
	if known["before"] {
		f.Before = cursorParam(q, &p)
	}
	if known["limit"] {
		size = intParam("limit", defaultReplayMax, 1, maxReplay)
	}
	return f, page, size, p.Err()
}

func (s *Server) listAttempts(c *gin.Context) {
	id, ok := s.pathID(c)
	if !ok {
		return
	}
	attempts, err := s.store.ListAttempts(c.Request.Context(), id)
	if err != nil {
		s.writeError(c, err)
		return
	}
	out := make([]attemptView, len(attempts))
	for i, a := range attempts {
		out[i] = viewAttempt(a)
	}
	writeJSON(c, http.StatusOK, out)
}

// jobAction answers with the job that act returns for the path's id:
// GET, cancel and replay differ only in the store call and the status.
func (s *Server) jobAction(status int, act func(Store, context.Context, int64) (dispatch.Job, error)) gin.HandlerFunc {
	return func(c *gin.Context) {
		id, ok := s.pathID(c)
		if !ok {
			return
		}
		j, err := act(s.store, c.Request.Context(), id)
		if err != nil {
			s.writeError(c, err)
			return
		}
		if status == http.StatusCreated {
			s.metrics.jobsCreated.Inc()
		}
		writeJSON(c, status, viewJob(j))
	}
}

// replayJobs is the dead-letter redrive: it replays finished jobs matching
// the search filters (at least one is required), up to limit.
func (s *Server) replayJobs(c *gin.Context) {
	if err := noBody(body(c)); err != nil {
		s.writeError(c, err)
		return
	}
	q := c.Request.URL.Query()
	dryRun := false
	var dp dispatch.Problems // dryRun's, named with the filters' own
	if v, ok := q["dryRun"]; ok {
		delete(q, "dryRun")
		switch {
		case len(v) > 1:
			dp.Add("dryRun", "must be given once") // a real run must not hang on which one counts
		case v[0] == "true" || v[0] == "1" || v[0] == "":
			dryRun = true
		case v[0] == "false" || v[0] == "0":
		default:
			dp.Add("dryRun", "must be true or false")
		}
	}
	f, _, limit, err := parseSearch(q, "limit")
	if len(dp) > 0 {
		var de *dispatch.Error
		if errors.As(err, &de) && de.Code == dispatch.EInvalid {
			dp = append(dp, de.Details...)
		}
		err = dp.Err()
	}
	if err != nil {
		s.writeError(c, err)
		return
	}
	if len(f.Statuses) == 0 && f.Source == "" && f.Type == "" && f.GroupID == "" &&
		f.CreatedAfter == nil && f.CreatedBefore == nil && len(f.Metadata) == 0 {
		var p dispatch.Problems
		p.Add("query", "at least one filter is required (for example status=ERROR)")
		s.writeError(c, p.Err())
		return
	}
	if dryRun {
		n, err := s.store.CountReplayable(c.Request.Context(), f)
		if err != nil {
			s.writeError(c, err)
			return
		}
		writeJSON(c, http.StatusOK, gin.H{"dryRun": true, "matched": n, "wouldReplay": min(n, limit), "replayed": 0, "items": []jobView{}})
		return
	}
	res, err := s.store.ReplayJobs(c.Request.Context(), f, limit)
	if err != nil {
		s.writeError(c, err)
		return
	}
	items := make([]jobView, len(res.Jobs))
	for i, j := range res.Jobs {
		items[i] = viewJob(j)
	}
	failed := make([]replayFailureView, len(res.Failed))
	for i, x := range res.Failed {
		failed[i] = viewReplayFailure(x)
	}
	if len(res.Jobs) > 0 {
		s.metrics.jobsCreated.Add(float64(len(res.Jobs)))
	}
	writeJSON(c, http.StatusOK, gin.H{"dryRun": false, "replayed": len(items), "items": items, "failed": failed, "more": res.More})
}

func (s *Server) pathID(c *gin.Context) (int64, bool) {
	id, ok := dispatch.ParseID(c.Param("id"))
	if !ok {
		var p dispatch.Problems
		p.Add("id", "must be a positive integer id")
		s.writeError(c, p.Err())
	}
	return id, ok
}

// parsePaging reads page and size alone (no filters allowed), and names
// every bad parameter: unknown ones with those of page and size.
func parsePaging(q url.Values) (dispatch.JobFilter, int, int, error) {
	var p dispatch.Problems
	for key := range q {
		if key != "page" && key != "size" {
			p.Add(key, "unknown query parameter")
		}
	}
	f, page, size, err := parseSearch(url.Values{"page": q["page"], "size": q["size"]}, "page", "size")
	var de *dispatch.Error
	if errors.As(err, &de) { // page's and size's problems (parseSearch returns no other error)
		p = append(slices.Clone(dispatch.Problems(de.Details)), p...)
	}
	return f, page, size, p.Err()
}

// noBody refuses a redrive's body: its filters and limit are read from the
// query string only, so a body naming them would be ignored and the
// redrive would select other jobs than the caller meant. Nothing, or an
// empty object, is no body.
func noBody(b []byte) error {
	if len(bytes.TrimSpace(b)) == 0 {
		return nil
	}
	var p dispatch.Problems
	var fields map[string]json.RawMessage
	err := json.Unmarshal(b, &fields)
	if err == nil && len(fields) == 0 {
		return nil // {}
	}
	if err != nil {
		p.Add("body", "must be empty: the redrive's filters and limit go in the query string (?status=ERROR&limit=100)")
		return p.Err()
	}
	for _, k := range slices.Sorted(maps.Keys(fields)) {
		p.Add(k, "goes in the query string (?%s=…): the redrive reads no body", k)
	}
	return p.Err()
}
