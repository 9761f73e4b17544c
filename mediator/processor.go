// Package mediator delivers webhooks. Its Processor is the processing
// endpoint's logic: claim the job, consult the target host's circuit
// breaker, sign and send the request through the SSRF-guarded Sender, and
// record the attempt with the job's new state before answering. It also
// holds the router's two mediators (HTTP, to a processing endpoint in
// another process; Local, in the same process) and the subscriptions'
// verification handshake.
package mediator

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/url"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/dispatchhq/dispatch"
	"github.com/dispatchhq/dispatch/handoff"
	"github.com/dispatchhq/dispatch/tracing"
)

// Store is what the processor needs from the job store.
type Store interface {
	ClaimJob(ctx context.Context, id int64, now time.Time, lease time.Duration) (dispatch.Claim, error)
	RecordClaim(ctx context.Context, j dispatch.Job) (bool, error)
	FinishAttempt(ctx context.Context, a dispatch.Attempt, t dispatch.Transition) (bool, error)
	Unclaim(ctx context.Context, j dispatch.Job, next time.Time, reason string) error
	AcquireSlot(ctx context.Context, subscriptionID int64, hold time.Duration) (int, bool, time.Time, error)
	ReleaseSlot(ctx context.Context, subscriptionID int64, slot int) error
	GetCredentials(ctx context.Context, id int64) (dispatch.Credentials, error)
}

// Processor is the processing endpoint's logic: claim the job,
// consult the host's breaker, sign and send, then record the attempt and the
// job's new state in one transaction before answering.
type Processor struct {
	store    Store
	sender   *Sender
	breakers *Breakers
	backoff  dispatch.Backoff
	timeout  time.Duration
	log      *slog.Logger
	metrics  *Metrics
	rateWait time.Duration
	// claimAfter: see ProcessorConfig.ClaimAfter.
	claimAfter time.Duration
	now        func() time.Time
	tracer     *tracing.Tracer

	traceContext func(ctx context.Context, id int64) (string, error)

	exhausted func(source, typ string)
}

// ProcessorConfig configures a Processor.
type ProcessorConfig struct {
	Sender          *Sender
	Breakers        *Breakers
	Backoff         dispatch.Backoff
	DeliveryTimeout time.Duration
	Logger          *slog.Logger
	Metrics         *Metrics
	// RateWait is how long a delivery may wait for its subscription's next
	// rate-limit slot before it is sent back to the queue (default 1s).
	RateWait time.Duration
	// ClaimAfter is how long a delivery runs on a deferred claim
	// (dispatch.Claim.Deferred) before the claim is written, so that a
	// slow delivery shows IN_PROGRESS and holds its lease like any other
	// (default 1s; a quicker one's claim is written with its outcome).
	ClaimAfter time.Duration
	// Tracer records the claim and the attempt's record as spans of the
	// job's trace (nil: tracing off); the Sender records the request.
	Tracer *tracing.Tracer
	// TraceContext reads the trace context stored with a job (its create
	// span), which each delivery span links to; only with a Tracer.
	TraceContext func(ctx context.Context, id int64) (string, error)
	// Exhausted, when set, is told of each job that has exhausted its
	// retries, once it is recorded (operational alerts). It must not block.
	Exhausted func(source, typ string)
}

// NewProcessor returns a Processor.
func NewProcessor(store Store, cfg ProcessorConfig) *Processor {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Metrics == nil {
		cfg.Metrics = NewMetrics(nil)
	}
	if cfg.RateWait <= 0 {
		cfg.RateWait = time.Second
	}
	return &Processor{
		store: store, sender: cfg.Sender, breakers: cfg.Breakers, backoff: cfg.Backoff,
		timeout: cfg.DeliveryTimeout, log: cfg.Logger.With("component", "processor"),
		metrics: cfg.Metrics, rateWait: cfg.RateWait, claimAfter: cmp.Or(cfg.ClaimAfter, time.Second), now: time.Now,
		tracer: cfg.Tracer, traceContext: cfg.TraceContext, exhausted: cfg.Exhausted,
	}
}

// lease is how long a claim lives: long enough for the delivery and the
// bookkeeping after it, short enough that a dead holder is replaced soon.
func (p *Processor) lease() time.Duration { return 2*p.timeout + 15*time.Second }

// Process handles one pointer. An error means the outcome could not be
// decided or recorded (the database is down); the router retries it.
func (p *Processor) Process(ctx context.Context, ptr dispatch.Pointer) (dispatch.Decision, error) {
	id, ok := dispatch.ParseID(ptr.ID)
	if !ok {
		p.log.Warn("pointer with a malformed job id dropped", "pointer_id", ptr.ID)
		return dispatch.Decision{Done: true, Reason: "malformed job id"}, nil
	}
	// The delivery must finish and be recorded even if the router hangs up,
	// but within the claim's lease: past it another processor may take the
	// job over, and this one must not still be writing.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.lease())
	defer cancel()
	now := p.now().UTC()
	claimCtx, claimSpan := ctx, trace.Span(nil)
	if _, handed := handoff.HandleFrom(ctx); !handed && ptr.SentMark != 0 && handoff.FirstReceive(ctx) {
		// The queue's first receive of the pointer sent under this mark:
		// as good a proof as a handle that no one claimed the job through
		// it (store.ClaimJob), for the claim only (it is no offer).
		claimCtx = handoff.WithHandle(ctx, handoff.Handle{ID: id, Mark: time.UnixMicro(ptr.SentMark).UTC()})
	}
	if p.tracer.Enabled() {
		claimCtx, claimSpan = p.startClaim(claimCtx, ptr)
	}
	c, err := p.store.ClaimJob(claimCtx, id, now, p.lease())
	if claimSpan != nil {
		endClaim(claimSpan, c, err)
	}
	if err != nil {
		return dispatch.Decision{}, err
	}
	switch c.State {
	case dispatch.ClaimMissing:
		p.log.Warn("pointer for an unknown job dropped", "job_id", id)
		return dispatch.Decision{Done: true, Reason: "unknown job"}, nil
	case dispatch.ClaimTerminal:
		return dispatch.Decision{Done: true, JobStatus: c.Job.Status, Reason: "job is " + string(c.Job.Status)}, nil
	case dispatch.ClaimBusy:
		return retryAt(c.Until, now, "another processor is delivering this job"), nil
	case dispatch.ClaimNotDue:
		d := retryAt(c.Until, now, "job is not due yet")
		d.RetryAfter = parkFor(c.Job, d.RetryAfter)
		return d, nil
	case dispatch.ClaimBlocked:
		// The store took this pointer out of the queue (it is sent again
		// later, behind its group): acknowledge this copy.
		return dispatch.Decision{Done: true, Reason: "an earlier job of its group is unfinished; pointer re-queued behind it"}, nil
	}
	// One logger for the attempt: each With formats its attributes anew.
	log := p.log.With("job_id", id, "attempt", c.Job.AttemptCount)
	var dc *deferredClaim
	if c.Deferred {
		dc = p.deferClaim(ctx, log, c.Job)
	}
	return p.deliver(ctx, log, c.Job, dc)
}

// groupRecheck is the longest a grouped job's pointer is put back on the
// queue for (its message's visibility) while the job waits for its next
// attempt or its scheduled time. A FIFO queue hands out nothing more of
// the group while the message is away, and nothing can reach it there: a
// job cancelled, or expired, meanwhile would hold its group until the
// whole backoff (up to DISPATCH_RETRY_MAX) had passed. Asked again each
// minute, the claim finds it ended and the group goes on.
const groupRecheck = time.Minute

// parkFor is how long j's pointer is put back for, to come back in d.
func parkFor(j dispatch.Job, d time.Duration) time.Duration {
	if j.GroupID != "" {
		return min(d, groupRecheck)
	}
	return d
}

func retryAt(until, now time.Time, reason string) dispatch.Decision {
	return dispatch.Decision{RetryAfter: clampDelay(until.Sub(now)), Reason: reason}
}

func clampDelay(d time.Duration) time.Duration {
	return min(max(d, 0), dispatch.MaxVisibilityDelay)
}

func (p *Processor) deliver(ctx context.Context, log *slog.Logger, j dispatch.Job, dc *deferredClaim) (dispatch.Decision, error) {
	if p.tracer.Enabled() {
		ctx = p.traced(ctx, &j)
	}
	if j.SubscriptionID != 0 {
		slot, d, held, err := p.pace(ctx, log, j, dc)
		if held || err != nil {
			return d, err
		}
		defer func() {
			if err := p.store.ReleaseSlot(ctx, j.SubscriptionID, slot); err != nil {
				log.Warn("cannot release the rate-limit slot; it frees when the lease ends", "err", err)
			}
		}()
	}
	var creds *dispatch.Credentials
	if j.CredentialsID != 0 {
		c, err := p.store.GetCredentials(ctx, j.CredentialsID)
		switch {
		case dispatch.ErrorCode(err) == dispatch.ENotFound:
			now := p.now().UTC()
			return p.record(ctx, log, j, dc, Delivery{
				Status: dispatch.AttemptFailure, StartedAt: now, CompletedAt: now,
				Err: fmt.Sprintf("credentials %d no longer exist (deleted?); the job cannot be signed", j.CredentialsID),
			})
		case err != nil:
			p.unclaim(ctx, log, j, dc, p.now().Add(p.backoff.Base), "credentials unavailable")
			return dispatch.Decision{}, fmt.Errorf("credentials %d: %w", j.CredentialsID, err)
		}
		if !c.Allows(j.TargetURL) {
			// An admin narrowed the credentials' allowedTargets after the
			// job was created: it is not sent with them, and not retried.
			now := p.now().UTC()
			return p.record(ctx, log, j, dc, Delivery{
				Status: dispatch.AttemptBlocked, StartedAt: now, CompletedAt: now, Err: notAllowed(c, j.TargetURL),
			})
		}
		creds = &c
	}
	host := ""
	if u, err := url.Parse(j.TargetURL); err == nil {
		host = u.Host
	}
	done, wait, ok := p.breakers.Allow(host)
	if !ok {
		next := p.now().Add(wait)
		p.unclaim(ctx, log, j, dc, next, fmt.Sprintf("circuit breaker open for %s; not attempted", host))
		p.metrics.breakerRejected.Inc()
		return dispatch.Decision{RetryAfter: clampDelay(wait), Reason: "circuit breaker open for " + host}, nil
	}
	d := p.sender.Send(ctx, &j, creds)
	done(d.Retryable)
	return p.record(ctx, log, j, dc, d)
}

// pace holds a subscription's deliveries to its rateLimitPerSecond, shared
// by every processor through the store's slots: it waits up to rateWait for
// a slot, or gives the claim back without spending an attempt (like an open
// breaker) and asks for the message again when a slot is due to be free.
// The slot is released after the attempt (deliver's defer).
func (p *Processor) pace(ctx context.Context, log *slog.Logger, j dispatch.Job, dc *deferredClaim) (int, dispatch.Decision, bool, error) {
	start := p.now()
	for {
		slot, ok, until, err := p.store.AcquireSlot(ctx, j.SubscriptionID, p.lease())
		if err != nil {
			p.unclaim(ctx, log, j, dc, p.now().Add(p.backoff.Base), "rate limit unavailable")
			return 0, dispatch.Decision{}, true, err
		}
		if ok {
			return slot, dispatch.Decision{}, false, nil
		}
		now := p.now()
		if until.Sub(start) > p.rateWait {
			reason := fmt.Sprintf("rate limit of subscription %d reached; not attempted", j.SubscriptionID)
			p.unclaim(ctx, log, j, dc, until, reason)
			p.metrics.rateLimited.Inc()
			return 0, retryAt(until, now, reason), true, nil
		}
		t := time.NewTimer(max(until.Sub(now), 10*time.Millisecond))
		select {
		case <-ctx.Done():
			t.Stop()
			return 0, dispatch.Decision{}, true, ctx.Err()
		case <-t.C:
		}
	}
}

func (p *Processor) unclaim(ctx context.Context, log *slog.Logger, j dispatch.Job, dc *deferredClaim, next time.Time, reason string) {
	_ = dc.write(ctx) // a claim given back is written first, to be given back the usual way (unwritten, nothing is)
	dc.settle()       // the attempt is over: no timer may write its claim later
	if dc.movedOn() {
		return // another holder's claim would match this one's attempt: it is not ours to give back
	}
	if err := p.store.Unclaim(ctx, j, next, reason); err != nil {
		log.Error("cannot give back the claim; it expires by itself", "err", err)
	}
}

// record writes the attempt and the job's transition, retrying briefly if
// the database blips, then answers.
func (p *Processor) record(ctx context.Context, log *slog.Logger, j dispatch.Job, dc *deferredClaim, d Delivery) (dispatch.Decision, error) {
	a := dispatch.Attempt{
		JobID: j.ID, AttemptNumber: j.AttemptCount, AttemptedAt: d.StartedAt, CompletedAt: d.CompletedAt,
		Status: d.Status, ResponseCode: d.Code, ResponseBody: d.Body, ErrorMessage: d.Err,
		RequestHeaders: d.RequestHeaders, ResponseHeaders: d.ResponseHeaders,
	}
	t := dispatch.Transition{Status: dispatch.StatusCompleted}
	var res dispatch.Decision
	exhausted := false
	switch {
	case d.Status == dispatch.AttemptSuccess:
		res = dispatch.Decision{Done: true}
	case d.Retryable && j.AttemptCount < j.MaxRetries:
		delay := p.backoff.Delay(j.RetryStrategy, j.AttemptCount)
		if d.RetryAfter > delay {
			delay = min(d.RetryAfter, p.backoff.Max)
		}
		t = dispatch.Transition{Status: dispatch.StatusFailed, LastError: d.Err, NextAttemptAt: d.CompletedAt.Add(delay)}
		res = dispatch.Decision{RetryAfter: clampDelay(parkFor(j, delay)), Reason: d.Err}
	case d.Retryable:
		exhausted = true
		t = dispatch.Transition{Status: dispatch.StatusError,
			LastError: fmt.Sprintf("retries exhausted after %d attempts; last: %s", j.AttemptCount, d.Err)}
		res = dispatch.Decision{Done: true}
	default:
		t = dispatch.Transition{Status: dispatch.StatusError, LastError: d.Err}
		res = dispatch.Decision{Done: true}
	}
	res.JobStatus = t.Status
	t.ClaimDeferred, t.Grouped = dc.settle(), j.GroupID != ""
	_, t.Handed = handoff.HandleFrom(ctx)
	if t.NextAttemptAt.IsZero() {
		t.NextAttemptAt = d.CompletedAt
	}
	var err error
	if p.tracer.Enabled() {
		var span trace.Span
		ctx, span = p.tracer.Start(ctx, "record attempt", trace.SpanKindInternal,
			attribute.String("db.system.name", "postgresql"), attribute.String("db.operation.name", "finish attempt"),
			attribute.String("dispatch.job.id", dispatch.FormatID(j.ID)), attribute.Int("dispatch.attempt", j.AttemptCount),
			attribute.String("dispatch.job.status", string(t.Status)))
		defer func() {
			if err != nil {
				tracing.Fail(span, "record_failed", err)
			}
			span.End()
		}()
	}
	// The outcome is worth the whole lease: given up on, a delivered
	// webhook would be sent again once the lease ends (or the job end
	// ERROR on its last attempt), so a database restart or failover of
	// some seconds is waited out. An error the database will answer again
	// (a constraint, a bug) is tried a few times only.
	for try := 0; ; try++ {
		if try >= 5 && err != nil && !outage(err) {
			break
		}
		if ctx.Err() != nil {
			// Past the lease nothing may be written: the outcome is not
			// recorded, so the pointer is not done with.
			err = cmp.Or(err, ctx.Err())
			break
		}
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		var applied bool
		applied, err = p.store.FinishAttempt(wctx, a, t)
		cancel()
		if err == nil {
			if !applied {
				// The pointer comes back to see the job's state: answering
				// done could delete the only pointer of a job still owed one.
				log.Warn("attempt recorded, but the claim was taken over meanwhile; job state left to the new holder")
				res = dispatch.Decision{RetryAfter: time.Second, Reason: "the job was taken over during the attempt"}
			} else {
				p.metrics.finish(j, d, t.Status, exhausted)
				if exhausted && p.exhausted != nil {
					p.exhausted(j.Source, j.Type)
				}
			}
			break
		}
		log.Warn("cannot record attempt yet", "err", err, "try", try+1)
		select { // back off, but never past the lease (ctx)
		case <-ctx.Done():
		case <-time.After(recordBackoff(try)):
		}
	}
	if err != nil {
		return dispatch.Decision{}, fmt.Errorf("record attempt: %w", err)
	}
	p.metrics.observe(d)
	log.Info("delivery attempt", "status", d.Status, "code", d.Code, "job_status", t.Status,
		"duration_ms", d.CompletedAt.Sub(d.StartedAt).Milliseconds())
	return res, nil
}

// startClaim starts the claim's span. It is a child of the mediation
// (the router's receive, or the processing endpoint's request).
func (p *Processor) startClaim(ctx context.Context, ptr dispatch.Pointer) (context.Context, trace.Span) {
	return p.tracer.Start(ctx, "claim job", trace.SpanKindInternal,
		attribute.String("db.system.name", "postgresql"), attribute.String("db.operation.name", "claim job"),
		attribute.String("dispatch.job.id", ptr.ID))
}

// claimStates names the claim outcomes on the span.
var claimStates = map[dispatch.ClaimState]string{dispatch.Claimed: "claimed", dispatch.ClaimMissing: "missing",
	dispatch.ClaimTerminal: "terminal", dispatch.ClaimBusy: "busy", dispatch.ClaimNotDue: "not_due", dispatch.ClaimBlocked: "blocked"}

// endClaim ends the claim's span with its outcome.
func endClaim(span trace.Span, c dispatch.Claim, err error) {
	if err != nil {
		tracing.Fail(span, "claim_failed", err)
	} else {
		span.SetAttributes(attribute.String("dispatch.claim", claimStates[c.State]), attribute.Int("dispatch.attempt", c.Job.AttemptCount),
			attribute.Bool("dispatch.claim.deferred", c.Deferred))
	}
	span.End()
}

// traced reads the trace context stored with the job, for the delivery
// span's link to its create, and returns the context the delivery runs in:
// ctx, or, when the mediation brought no trace (its message carried none),
// the job's trace.
func (p *Processor) traced(ctx context.Context, j *dispatch.Job) context.Context {
	if p.traceContext == nil {
		return ctx
	}
	tc, err := p.traceContext(ctx, j.ID)
	if err != nil {
		return ctx // the delivery goes on; only its span's link is lost
	}
	j.TraceContext = tc
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return p.tracer.Decode(ctx, tc)
	}
	return ctx
}

// recordBackoff is the wait before recording an outcome again after the
// try-th failure: 200 ms doubling, at most 3.2 s.
func recordBackoff(try int) time.Duration {
	return time.Duration(math.Pow(2, float64(min(try, 4)))) * 200 * time.Millisecond
}

// outage reports whether err is the database being away or busy for a
// while (a connection lost or refused, a restart, a failover, a timeout),
// not an answer it would give again.
func outage(err error) bool {
	var coded interface{ SQLState() string } // the server's answer (pgconn.PgError)
	if !errors.As(err, &coded) {
		return true // no answer from the server: the connection, a timeout
	}
	switch code := coded.SQLState(); {
	case strings.HasPrefix(code, "08"), // connection exception
		strings.HasPrefix(code, "57P"),   // admin shutdown, crash shutdown, cannot connect now
		strings.HasPrefix(code, "53"),    // insufficient resources
		code == "40001", code == "40P01", // serialization failure, deadlock
		code == "25006": // read-only transaction: a failover's standby
		return true
	}
	return false
}
