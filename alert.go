package dispatch

import (
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"time"
	"unicode"
)

// AlertSource is the source of every alert job.
const AlertSource = "dispatch.alerts"

// Alert destination kinds.
const (
	// AlertWebhook receives the alert as JSON, signed with the
	// destination's credentials (dispatch's own signature).
	AlertWebhook = "webhook"
	// AlertSlack is a Slack-compatible incoming webhook: the body is
	// {"text": "..."}.
	AlertSlack = "slack"
)

// Alert kinds: the type of each alert job.
const (
	AlertSubscriptionDisabled = "subscription.disabled"
	AlertSubscriptionEnabled  = "subscription.enabled"
	AlertBreakerOpened        = "breaker.opened"
	AlertBreakerClosed        = "breaker.closed"
	AlertJobsExhausted        = "jobs.exhausted"
	AlertBacklogOld           = "backlog.old"
)

// AlertKinds lists every alert kind.
var AlertKinds = []string{AlertSubscriptionDisabled, AlertSubscriptionEnabled, AlertBreakerOpened,
	AlertBreakerClosed, AlertJobsExhausted, AlertBacklogOld}

// AlertDestination is where operational alerts go.
type AlertDestination struct {
	ID            int64
	Name          string
	Kind          string // AlertWebhook or AlertSlack
	URL           string
	CredentialsID int64 // signs a webhook; 0 for Slack
	CreatedAt     time.Time
}

// AlertEvent is one thing that happened: a subscription disabled, a
// breaker opened for a host, ...
type AlertEvent struct {
	Kind    string    `json:"-"`
	Subject string    `json:"subject"`
	Detail  string    `json:"detail,omitempty"`
	At      time.Time `json:"at"`
}

// AlertDue is what one alert job tells one destination: the events of one
// kind since its last alert of that kind (Count of them; Events holds the
// first few).
type AlertDue struct {
	Destination AlertDestination
	Kind        string
	Count       int
	Since       time.Time // the first event's time
	Events      []AlertEvent
	// Key names the batch (destination, kind, last event): the job's
	// idempotency key.
	Key string
}

// alertNouns says what Count counts, per kind.
var alertNouns = map[string][2]string{
	AlertSubscriptionDisabled: {"subscription disabled", "subscriptions disabled"},
	AlertSubscriptionEnabled:  {"subscription enabled again", "subscriptions enabled again"},
	AlertBreakerOpened:        {"target's circuit breaker opened", "targets' circuit breakers opened"},
	AlertBreakerClosed:        {"target's circuit breaker closed", "targets' circuit breakers closed"},
	AlertJobsExhausted:        {"source/type exhausting retries above the threshold", "sources/types exhausting retries above the threshold"},
	AlertBacklogOld:           {"time the oldest pending job passed the threshold", "times the oldest pending job passed the threshold"},
}

// Summary is the alert's one line: "7 subscriptions disabled since …".
func (a AlertDue) Summary() string { return a.summary(func(s string) string { return s }) }

// summary is Summary with the event's subject (outside text) written by
// show.
func (a AlertDue) summary(show func(string) string) string {
	noun := alertNouns[a.Kind]
	if a.Count == 1 {
		return fmt.Sprintf("dispatch: 1 %s: %s", noun[0], show(a.Events[0].Subject))
	}
	return fmt.Sprintf("dispatch: %d %s since %s", a.Count, noun[1], a.Since.UTC().Format(time.RFC3339))
}

// slackEscaper writes the three characters Slack reads as markup
// (https://api.slack.com/reference/surfaces/formatting#escaping).
var slackEscaper = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;")

// slackText makes s, text from outside (a subscription's name, a job's
// source and type, a host, a reason), plain text in a Slack message: its
// &, < and > escaped, so that it cannot mention (<!channel>), link
// (<https://…|…>) or name a channel or a user; and its line breaks (and
// other control characters) turned into spaces, so that it stays on its
// own line and cannot write lines that look like dispatch's.
func slackText(s string) string {
	return strings.Map(func(r rune) rune {
		if unicode.IsControl(r) || r == '\u2028' || r == '\u2029' {
			return ' '
		}
		return r
	}, slackEscaper.Replace(s))
}

// AlertMaxRetries is how often an alert job is retried.
const AlertMaxRetries = 10

// Job is the alert job for the destination: a JSON document for a
// webhook, {"text": …} for Slack.
func (a AlertDue) Job() *Job {
	var body any
	if a.Destination.Kind == AlertSlack {
		// Subjects and details come from outside: Slack is given them as
		// plain text.
		var b strings.Builder
		b.WriteString(a.summary(slackText))
		for _, e := range a.Events {
			b.WriteString("\n• " + slackText(e.Subject))
			if e.Detail != "" {
				b.WriteString(": " + slackText(e.Detail))
			}
		}
		if more := a.Count - len(a.Events); more > 0 {
			fmt.Fprintf(&b, "\n… and %d more", more)
		}
		body = map[string]string{"text": b.String()}
	} else {
		body = struct {
			Type    string       `json:"type"`
			Summary string       `json:"summary"`
			Count   int          `json:"count"`
			Since   time.Time    `json:"since"`
			Events  []AlertEvent `json:"events"`
		}{a.Kind, a.Summary(), a.Count, a.Since.UTC(), a.Events}
	}
	payload, _ := json.Marshal(body)
	return &Job{
		Source: AlertSource, Type: a.Kind, TargetURL: a.Destination.URL, Protocol: ProtocolHTTPWebhook,
		Payload: string(payload), PayloadContentType: "application/json",
		CredentialsID: a.Destination.CredentialsID, MaxRetries: AlertMaxRetries, RetryStrategy: RetryExponential,
		IdempotencyKey: a.Key,
		Metadata:       map[string]string{"alertDestinationId": FormatID(a.Destination.ID), "alertCount": fmt.Sprint(a.Count)},
	}
}

// TargetIsSecret reports whether j's target URL is itself a secret: an
// alert to a Slack incoming webhook (an alert job without credentials),
// whose URL is what posts to the channel. Such a target is shown, and
// traced, as its host only (ShowHost).
func (j Job) TargetIsSecret() bool { return j.Source == AlertSource && j.CredentialsID == 0 }

// ShowHost renders a URL as its scheme and host, the rest replaced by "/…".
func ShowHost(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return "…"
	}
	return u.Scheme + "://" + u.Host + "/…"
}

// CheckAlertKind notes the problems of an alert destination's kind (set:
// webhook or slack) given whether it names credentials: a webhook's alerts
// are signed, a Slack incoming-webhook URL is its own secret.
func CheckAlertKind(p *Problems, kind string, withCredentials bool) {
	switch kind {
	case AlertWebhook:
		if !withCredentials {
			p.Add("credentialsId", "is required for a webhook: alerts are signed")
		}
	case AlertSlack:
		if withCredentials {
			p.Add("credentialsId", "is not used by a slack destination (an incoming-webhook URL is its own secret)")
		}
	case "":
	default:
		p.Add("kind", "must be webhook or slack")
	}
}
