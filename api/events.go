package api

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/dispatchhq/dispatch"
	"github.com/dispatchhq/dispatch/api/decode"
)

// Verifier runs a subscription's verification handshake and stores the outcome.
type Verifier interface {
	// Verify runs it for /verify (and a creation with "verify": true); a
	// DISABLED subscription is refused (409).
	Verify(ctx context.Context, id int64) (dispatch.Subscription, error)
	// Enable runs it for the /enable of a DISABLED subscription whose url
	// has not passed: the outcome decides.
	Enable(ctx context.Context, id int64) (dispatch.Subscription, error)
}

func (s *Server) createSubscription(c *gin.Context) {
	b := body(c)
	sub, verify, err := decode.Subscription(b, s.cfg.JobRules)
	if err != nil {
		s.writeError(c, s.withMissingCredentials(c.Request.Context(), err, decode.CredentialsID(b)))
		return
	}
	out, err := s.store.CreateSubscription(c.Request.Context(), sub)
	if err != nil {
		s.writeError(c, err)
		return
	}
	if verify {
		// The subscription is stored: it is answered 201 whatever happens
		// to the handshake, so that a client's retry cannot make a second
		// one. One that could not run leaves it PENDING_VERIFICATION, to
		// verify with POST …/{id}/verify.
		if v, err := s.verify(c.Request.Context(), out.ID, false); err != nil {
			s.log.Warn("subscription created, but its verification handshake could not run", "subscription_id", out.ID, "err", err)
		} else {
			out = v
		}
	}
	writeJSON(c, http.StatusCreated, viewSubscription(out))
}

// verify runs the handshake of subscription id; enabling: for its enable.
func (s *Server) verify(ctx context.Context, id int64, enabling bool) (dispatch.Subscription, error) {
	if s.cfg.Verifier == nil {
		return dispatch.Subscription{}, dispatch.Errorf(dispatch.EUnavailable, "verification is not available in this process")
	}
	if enabling {
		return s.cfg.Verifier.Enable(ctx, id)
	}
	return s.cfg.Verifier.Verify(ctx, id)
}

func (s *Server) listSubscriptions(c *gin.Context) {
	q := c.Request.URL.Query()
	var p dispatch.Problems
	page, size := paging(q, &p, "eventType", "status", "before")
	f := dispatch.SubscriptionFilter{EventType: q.Get("eventType"), Status: dispatch.SubscriptionStatus(q.Get("status")), Before: cursorParam(q, &p)}
	if f.Status != "" && !f.Status.Valid() {
		p.Add("status", "must be one of ACTIVE, PENDING_VERIFICATION, DISABLED")
	}
	// The subscriptions an event of this type would reach: a pattern here
	// (order.*) would match only the patterns spelt the same.
	dispatch.CheckEventType(&p, "eventType", f.EventType)
	if err := p.Err(); err != nil {
		s.writeError(c, err)
		return
	}
	subs, total, err := s.store.ListSubscriptions(c.Request.Context(), f, page, size)
	if err != nil {
		s.writeError(c, err)
		return
	}
	ids := make([]int64, len(subs))
	for i, sub := range subs {
		ids[i] = sub.ID
	}
	health, err := s.store.SubscriptionHealth(c.Request.Context(), ids)
	if err != nil {
		s.writeError(c, err)
		return
	}
	items := make([]subscriptionView, len(subs))
	var last int64
	for i, sub := range subs {
		items[i], last = viewSubscription(sub), sub.ID
		items[i].Health = viewSubscriptionHealth(health[sub.ID])
	}
	// nextBefore: a list read page by page while subscriptions are made or
	// deleted neither repeats nor skips one, as an offset would.
	writePage(c, items, page, size, total, last, true)
}

// getSubscription answers a subscription with its health.
func (s *Server) getSubscription(c *gin.Context) {
	id, ok := s.pathID(c)
	if !ok {
		return
	}
	sub, err := s.store.GetSubscription(c.Request.Context(), id)
	if err != nil {
		s.writeError(c, err)
		return
	}
	health, err := s.store.SubscriptionHealth(c.Request.Context(), []int64{id})
	if err != nil {
		s.writeError(c, err)
		return
	}
	v := viewSubscription(sub)
	v.Health = viewSubscriptionHealth(health[id])
	writeJSON(c, http.StatusOK, v)
}

// subscriptionAction answers with the subscription act returns for the
// path's id: read, patch, enable, disable and verify differ only in act.
func (s *Server) subscriptionAction(act func(ctx context.Context, c *gin.Context, id int64) (dispatch.Subscription, error)) gin.HandlerFunc {
	return func(c *gin.Context) {
		id, ok := s.pathID(c)
		if !ok {
			return
		}
		sub, err := act(c.Request.Context(), c, id)
		if err != nil {
			s.writeError(c, err)
			return
		}
		writeJSON(c, http.StatusOK, viewSubscription(sub))
	}
}

func (s *Server) patchSubscription(ctx context.Context, c *gin.Context, id int64) (dispatch.Subscription, error) {
	b := body(c)
	return s.store.UpdateSubscription(ctx, id, func(sub *dispatch.Subscription) error {
		err := decode.PatchSubscription(b, s.cfg.JobRules, sub)
		if err == nil {
			return nil
		}
		// Only changed credentials are looked up, as the store does for a
		// patch that passes.
		if creds := decode.CredentialsID(b); creds != sub.CredentialsID {
			err = s.withMissingCredentials(ctx, err, creds)
		}
		return err
	})
}

// enableSubscription makes a DISABLED subscription ACTIVE. One created to
// be verified whose url has not passed the handshake is not made ACTIVE
// unverified: enable runs the handshake, as /verify does, and its outcome
// decides (ACTIVE, or PENDING_VERIFICATION with the reason). A
// subscription waiting for its handshake is activated by /verify only.
func (s *Server) enableSubscription(ctx context.Context, _ *gin.Context, id int64) (dispatch.Subscription, error) {
	sub, err := s.store.SetSubscriptionStatus(ctx, id, dispatch.SubscriptionActive, "", dispatch.SubscriptionDisabled)
	if errors.Is(err, dispatch.ErrUnverified) {
		return s.verify(ctx, id, true)
	}
	return sub, err
}

func (s *Server) disableSubscription(ctx context.Context, _ *gin.Context, id int64) (dispatch.Subscription, error) {
	return s.store.SetSubscriptionStatus(ctx, id, dispatch.SubscriptionDisabled, "disabled by request")
}

// verifySubscription runs the handshake again; a DISABLED subscription is
// refused (409: its enable runs the handshake), so that an operator's
// disable is not undone.
func (s *Server) verifySubscription(ctx context.Context, _ *gin.Context, id int64) (dispatch.Subscription, error) {
	return s.verify(ctx, id, false)
}

func (s *Server) deleteSubscription(c *gin.Context) {
	id, ok := s.pathID(c)
	if !ok {
		return
	}
	if err := s.store.DeleteSubscription(c.Request.Context(), id); err != nil {
		s.writeError(c, err)
		return
	}
	c.Status(http.StatusNoContent)
}

// publishEvent stores the event and one job per matching ACTIVE
// subscription in one transaction: 201, or 200 with the same event and
// jobs when the idempotency key was used before.
func (s *Server) publishEvent(c *gin.Context) {
	e, data, err := decode.Event(body(c))
	if err != nil {
		s.writeError(c, err)
		return
	}
	span := s.startPublish(c.Request.Context(), e)
	out, created, err := s.store.PublishEvent(c.Request.Context(), e, data)
	endPublish(span, out, created, err)
	if err != nil {
		s.writeError(c, err)
		return
	}
	if !created {
		writeJSON(c, http.StatusOK, viewEventWithJobs(out))
		return
	}
	if len(out.Jobs) > 0 {
		s.metrics.jobsCreated.Add(float64(len(out.Jobs)))
	}
	writeJSON(c, http.StatusCreated, viewEventWithJobs(out))
}

func (s *Server) getEvent(c *gin.Context) {
	id, ok := s.pathID(c)
	if !ok {
		return
	}
	e, err := s.store.GetEvent(c.Request.Context(), id)
	if err != nil {
		s.writeError(c, err)
		return
	}
	writeJSON(c, http.StatusOK, viewEventWithJobs(e))
}

func (s *Server) searchEvents(c *gin.Context) {
	q := c.Request.URL.Query()
	var p dispatch.Problems
	page, size := paging(q, &p, "type", "source", "createdAfter", "createdBefore", "before")
	checkDepth(&p, page, size)
	f := dispatch.EventFilter{Type: q.Get("type"), Source: q.Get("source"), Before: cursorParam(q, &p)}
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
	if err := p.Err(); err != nil {
		s.writeError(c, err)
		return
	}
	events, total, err := s.store.SearchEvents(c.Request.Context(), f, page, size)
	if err != nil {
		s.writeError(c, err)
		return
	}
	items := make([]eventView, len(events))
	var last int64
	for i, e := range events {
		items[i], last = viewEvent(e), e.ID
	}
	writePage(c, items, page, size, total, last, true)
}

// paging reads page and size, and notes unknown or repeated parameters.
func paging(q url.Values, p *dispatch.Problems, known ...string) (int, int) {
	allowed := map[string]bool{"page": true, "size": true}
	for _, k := range known {
		allowed[k] = true
	}
	for _, k := range sortedParams(q) {
		if !allowed[k] {
			p.Add(k, "unknown query parameter")
		} else if len(q[k]) > 1 {
			p.Add(k, "must be given once")
		}
	}
	page, size := 0, defaultPageSize
	if v := q.Get("page"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || n > dispatch.CountLimit {
			p.Add("page", "must be a whole number from 0 to %d", dispatch.CountLimit)
		} else {
			page = n
		}
	}
	if v := q.Get("size"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxPageSize {
			p.Add("size", "must be a whole number from 1 to %d", maxPageSize)
		} else {
			size = n
		}
	}
	return page, size
}
