package mediator

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/big"

	"github.com/dispatchhq/dispatch"
)

// VerifyStore is what the verification handshake needs from the store.
type VerifyStore interface {
	GetSubscription(ctx context.Context, id int64) (dispatch.Subscription, error)
	GetCredentials(ctx context.Context, id int64) (dispatch.Credentials, error)
	// ApplyHandshake stores the outcome (reason "": passed) only if the
	// subscription still has the url and status the handshake started
	// from, and returns it as it now is.
	ApplyHandshake(ctx context.Context, id int64, url string, from dispatch.SubscriptionStatus, reason string) (dispatch.Subscription, bool, error)
}

// Verifier runs the subscription verification handshake: a
// signed POST of {"type":"dispatch.verification","challenge":"<random>"} to
// the subscription's url through the same SSRF-guarded Sender as every
// delivery. A 2xx answer whose JSON body echoes the challenge makes the
// subscription ACTIVE with that url verified; anything else leaves it
// PENDING_VERIFICATION with the reason. The outcome is for the url the
// handshake reached: it is stored only if the url (and the status) did not
// change while the handshake ran. A DISABLED subscription is verified only
// as it is enabled (Enable): /verify does not undo an operator's disable.
type Verifier struct {
	store  VerifyStore
	sender *Sender
	log    *slog.Logger
}

// NewVerifier returns a Verifier.
func NewVerifier(store VerifyStore, sender *Sender, log *slog.Logger) *Verifier {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Verifier{store: store, sender: sender, log: log.With("component", "verifier")}
}

// errDisabled refuses the handshake of a DISABLED subscription outside an
// enable: its outcome would make it ACTIVE, or PENDING_VERIFICATION in
// place of the reason it was disabled for.
var errDisabled = &dispatch.Error{Code: dispatch.EConflict,
	Message: "the subscription is DISABLED: enable it (POST …/enable runs the handshake when its url has not passed one)"}

// Verify runs the handshake for subscription id (POST …/verify) and stores
// its outcome. It returns the subscription as it is afterwards: when its
// url or status changed while the handshake ran, the outcome is dropped
// and the subscription is returned as that change left it. A DISABLED
// subscription is refused (errDisabled) and left as it is.
func (v *Verifier) Verify(ctx context.Context, id int64) (dispatch.Subscription, error) {
	return v.verify(ctx, id, false)
}

// Enable runs the handshake that enabling subscription id needs when it
// requires verification and its url has not passed (POST …/enable of a
// DISABLED one): as Verify, but from DISABLED too, so that its outcome
// decides: ACTIVE, or PENDING_VERIFICATION with the reason.
func (v *Verifier) Enable(ctx context.Context, id int64) (dispatch.Subscription, error) {
	return v.verify(ctx, id, true)
}

func (v *Verifier) verify(ctx context.Context, id int64, enabling bool) (dispatch.Subscription, error) {
	sub, err := v.store.GetSubscription(ctx, id)
	if err != nil {
		return sub, err
	}
	if sub.Status == dispatch.SubscriptionDisabled && !enabling {
		return sub, errDisabled // 409: nothing sent, nothing stored
	}
	if err := v.checkTarget(ctx, sub); err != nil {
		return sub, err // 422: nothing sent, nothing stored
	}
	reason := v.handshake(ctx, sub)
	if reason != "" {
		reason = "verification failed: " + reason
	}
	// Compare-and-set from the status read above: a disable that lands
	// while the handshake runs drops its outcome.
	out, applied, err := v.store.ApplyHandshake(ctx, id, sub.URL, sub.Status, reason)
	if err != nil {
		return out, err
	}
	if !applied {
		v.log.Info("verification handshake outcome dropped: the subscription changed while it ran",
			"subscription_id", id, "passed", reason == "", "status", out.Status)
		return out, nil
	}
	v.log.Info("verification handshake", "subscription_id", id, "status", out.Status, "reason", reason)
	return out, nil
}

// checkTarget refuses a handshake whose credentials may not be sent to the
// subscription's url (their allowedTargets). Credentials that
// cannot be read are left to handshake, which reports them as its reason.
func (v *Verifier) checkTarget(ctx context.Context, sub dispatch.Subscription) error {
	if sub.CredentialsID == 0 {
		return nil
	}
	c, err := v.store.GetCredentials(ctx, sub.CredentialsID)
	if err != nil {
		return nil
	}
	return c.CheckTarget(sub.URL)
}

// handshake returns why the endpoint failed the handshake, or "".
func (v *Verifier) handshake(ctx context.Context, sub dispatch.Subscription) string {
	var creds *dispatch.Credentials
	if sub.CredentialsID != 0 {
		c, err := v.store.GetCredentials(ctx, sub.CredentialsID)
		if err != nil {
			return fmt.Sprintf("credentials %d unavailable", sub.CredentialsID)
		}
		creds = &c
	}
	buf := make([]byte, 16)
	_, _ = rand.Read(buf)
	challenge := hex.EncodeToString(buf)
	payload, _ := json.Marshal(map[string]string{"type": dispatch.VerificationType, "challenge": challenge})
	// A message of its own (not a job): a fresh random id for
	// X-Dispatch-Job-Id / webhook-id, so receivers never dedupe it away.
	n, _ := rand.Int(rand.Reader, big.NewInt(1<<62))
	msg := dispatch.Job{
		ID: n.Int64() + 1, TargetURL: sub.URL, Headers: sub.Headers, Payload: string(payload),
		PayloadContentType: "application/json", AttemptCount: 1, Type: dispatch.VerificationType,
	}
	d := v.sender.Send(ctx, &msg, creds)
	if d.Status != dispatch.AttemptSuccess {
		return d.Err
	}
	var answer struct {
		Challenge string `json:"challenge"`
	}
	if err := json.Unmarshal([]byte(d.Body), &answer); err != nil {
		return fmt.Sprintf("HTTP %d, but the body is not a JSON object with the challenge", d.Code)
	}
	if answer.Challenge != challenge {
		return fmt.Sprintf("HTTP %d, but the body does not echo the challenge", d.Code)
	}
	return ""
}
