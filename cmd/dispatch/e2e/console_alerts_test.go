package e2e

import (
	"net/http"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// TestConsoleAlertsInABrowser drives the Alerts page: add a Slack
// destination from the form (its hostile name stays text), see an alert
// made when a subscription is disabled listed as a job, delete the
// destination.
func TestConsoleAlertsInABrowser(t *testing.T) {
	t.Parallel()
	in := start(t, "all", map[string]string{"DISPATCH_ALERT_WINDOW": "1s"})
	slack := newReceiver(t, nil)
	target := newReceiver(t, nil)
	sub := in.subscribe(map[string]any{"name": "orders", "url": target.URL, "eventTypes": []string{"*"}})

	b := newBrowser(t, in.apiURL)
	b.do("open console", chromedp.Navigate(in.apiURL+"/console/"))
	b.waitFor("the sign-in form", `!!document.querySelector('#login-form')`)
	b.do("sign in", chromedp.SendKeys(chromedp.ID("token"), adminToken), chromedp.Click(chromedp.ID("login")))
	b.waitFor("the console", `!!document.querySelector('.nav-link[data-path="alerts"]')`)

	b.visit("#/alerts")
	b.waitFor("the empty alerts page", `document.querySelector('#alert-destinations').innerText.includes('No alert destinations yet') &&
		document.querySelector('#alert-recent').innerText.includes('No alerts yet')`)
	b.do("add a destination", chromedp.SendKeys(chromedp.ID("a-name"), hostile), chromedp.SendKeys(chromedp.ID("a-url"), slack.URL),
		chromedp.Click(chromedp.ID("create-destination")))
	b.waitFor("the destination listed", `document.querySelectorAll('#destinations-table .destination-row').length === 1 &&
		document.querySelector('#destinations-table').innerText.includes('slack')`)
	if name := eval[string](b, `document.querySelector('#destinations-table .destination-row td').textContent`); name != hostile {
		t.Errorf("the destination's name reads %q, want the markup as text", name)
	}

	if code := in.do("POST", "/api/dispatch/subscriptions/"+sub.ID+"/disable", apiToken, nil, nil); code != http.StatusOK {
		t.Fatalf("disable: %d", code)
	}
	eventually(t, 20*time.Second, func() bool { return slack.count() == 1 }, func() string { return "no alert reached the Slack receiver" })
	b.visit("#/overview")
	b.visit("#/alerts")
	b.waitFor("the alert listed", `document.querySelectorAll('#alerts-table .alert-row').length === 1 &&
		document.querySelector('#alerts-table').innerText.includes('subscription.disabled')`)
	b.shot("31-alerts")

	b.do("delete", chromedp.Click(chromedp.CSS(`#destinations-table button[data-delete]`)))
	b.do("confirm", chromedp.Click(chromedp.CSS(`#destinations-table button[data-confirm-delete]`)))
	b.waitFor("no destination left", `document.querySelector('#alert-destinations').innerText.includes('No alert destinations yet')`)
	if eval[bool](b, `window.__xss !== undefined`) {
		t.Error("markup in a destination's name ran as script")
	}
}
