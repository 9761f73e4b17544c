package dispatch

// ProcessAnswer is the processing endpoint's JSON body: the API writes it,
// the router's HTTP mediator reads it. 200 with status "done" (and the
// job's status) deletes the message; 400 with status "retry" and
// retryAfterSeconds sets its visibility to that delay.
type ProcessAnswer struct {
	JobStatus         *string `json:"jobStatus,omitempty"` // set when done
	Reason            string  `json:"reason"`
	RetryAfterSeconds *int    `json:"retryAfterSeconds,omitempty"` // set on retry
	// GivenBack is set on the retry of a job the API offered the router
	// (the request's X-Dispatch-Offer): the API has put it back in its
	// outbox, which sends it when due.
	GivenBack bool   `json:"givenBack,omitempty"`
	Status    string `json:"status"`
}
