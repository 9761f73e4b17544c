package dispatch

import (
	"errors"
	"fmt"
	"time"
)

// Error codes. The api package maps each to one HTTP status.
const (
	EInvalid      = "invalid_request"
	EUnauthorized = "unauthorized"
	EForbidden    = "forbidden"
	ENotFound     = "not_found"
	EConflict     = "conflict"
	// EUnprocessable: well-formed, but the data it refers to does not allow it.
	EUnprocessable = "unprocessable"
	ETooLarge      = "payload_too_large"
	EMediaType     = "unsupported_media_type"
	EUnavailable   = "unavailable"
	EInternal      = "internal"
)

// FieldError names one bad field of a request.
type FieldError struct {
	Field   string `json:"field"`
	Message string `json:"message"`
}

// Error is an error meant for the caller: a code, a message, and for
// validation every bad field.
type Error struct {
	Code    string
	Message string
	Details []FieldError
}

func (e *Error) Error() string {
	if len(e.Details) == 0 {
		return fmt.Sprintf("%s: %s", e.Code, e.Message)
	}
	return fmt.Sprintf("%s: %s (%d problems)", e.Code, e.Message, len(e.Details))
}

// Errorf returns an *Error with a formatted message.
func Errorf(code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// ErrorCode returns the code of an *Error in err's chain, or EInternal.
func ErrorCode(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return EInternal
}

// Problems collects field errors; Err returns nil when there are none.
type Problems []FieldError

// Add records a problem with a field.
func (p *Problems) Add(field, format string, args ...any) {
	*p = append(*p, FieldError{Field: field, Message: fmt.Sprintf(format, args...)})
}

// AddItem records the problems of a batch's item i, each field named
// jobs[i].field (the item itself when de names no field).
func (p *Problems) AddItem(i int, de *Error) {
	prefix := fmt.Sprintf("jobs[%d]", i)
	if len(de.Details) == 0 {
		*p = append(*p, FieldError{Field: prefix, Message: de.Message})
	}
	for _, d := range de.Details {
		*p = append(*p, FieldError{Field: prefix + "." + d.Field, Message: d.Message})
	}
}

// MaxDetails caps the problems listed in one answer, so a body of a
// million bad keys cannot make an answer eight times its size.
const MaxDetails = 100

// Err returns the problems as an EInvalid *Error, or nil. Past MaxDetails
// problems, the last one listed says how many more there are.
func (p Problems) Err() error {
	if len(p) == 0 {
		return nil
	}
	return &Error{Code: EInvalid, Message: "the request has invalid fields", Details: p.Capped()}
}

// Capped is p, or past MaxDetails problems its first ones and, last, how
// many more there are.
func (p Problems) Capped() Problems {
	if len(p) <= MaxDetails {
		return p
	}
	more := len(p) - MaxDetails + 1
	return append(p[:MaxDetails-1:MaxDetails-1], FieldError{Field: "body", Message: fmt.Sprintf("and %d more problems", more)})
}

// MaxVisibilityDelay is SQS's longest visibility timeout (12 h): the
// longest a retry can be put off in one step.
const MaxVisibilityDelay = 43200 * time.Second

// RetryAfter is the typed outcome "not done; bring the message back after
// Delay". A mediator returns it and the router tests for it with errors.As;
// any other non-nil error also means retry, with the router's own backoff.
type RetryAfter struct {
	Delay  time.Duration
	Reason string
	// GivenBack: the processing endpoint has put the job back in its
	// outbox itself (a job offered by the API, package handoff), so the
	// router has nothing to send.
	GivenBack bool
}

func (e *RetryAfter) Error() string {
	return fmt.Sprintf("retry after %s: %s", e.Delay, e.Reason)
}
