package mediator

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/dispatchhq/dispatch"
)

// Local is the router's mediator when the router and the processing
// endpoint share a process (`dispatch all`): it hands the pointer straight to
// the Processor, with exactly the outcomes the processing endpoint turns into
// 200, 400 {"retryAfterSeconds"} and 503, minus an HTTP round trip and two
// JSON encodings per delivery.
type Local struct {
	p *Processor
}

// NewLocal returns a Local mediator over p.
func NewLocal(p *Processor) *Local { return &Local{p: p} }

// Mediate returns nil when the pointer is done with (delete the message), a
// *dispatch.RetryAfter when it should come back later (rounded up to whole
// seconds, as the endpoint answers), and any other error when the outcome
// could not be recorded (the router backs off and tries again).
func (l *Local) Mediate(ctx context.Context, ptr dispatch.Pointer) error {
	d, err := l.p.Process(ctx, ptr)
	if err != nil {
		return fmt.Errorf("process job %s: %w", ptr.ID, err)
	}
	if d.Done {
		return nil
	}
	secs := math.Ceil(d.RetryAfter.Seconds())
	return &dispatch.RetryAfter{Delay: time.Duration(secs) * time.Second, Reason: d.Reason}
}
