//go:build !linux && !darwin

package sqsfake

import "net"

// closedByPeer cannot tell on this platform: a poll relies on its
// request's context alone.
func closedByPeer(net.Conn) bool { return false }
