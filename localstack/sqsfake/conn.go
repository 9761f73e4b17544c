package sqsfake

import (
	"context"
	"net"
)

// connKey carries a request's connection in its context (ConnContext).
type connKey struct{}

// ConnContext is for http.Server.ConnContext: it lets a long poll see that
// its client has closed the connection the moment the close arrives, not
// when the server's own read of the connection gets round to it. A
// receiver that stops cancels its poll and may give back, at once, the
// messages it held; a poll that took them meanwhile would hide them for
// their visibility timeout. Without it, a poll tells from the request's
// context alone (which real SQS does not even do: a message it hands to a
// poll whose client has gone comes back after its visibility timeout).
//
//	srv := &http.Server{Handler: s.Handler(), ConnContext: sqsfake.ConnContext}
func ConnContext(ctx context.Context, c net.Conn) context.Context {
	return context.WithValue(ctx, connKey{}, c)
}

// clientGone reports whether the client of the request whose context is
// ctx has closed its connection, as far as the connection shows (false
// when ConnContext is not in use or the platform cannot tell).
func clientGone(ctx context.Context) bool {
	c, ok := ctx.Value(connKey{}).(net.Conn)
	return ok && closedByPeer(c)
}
