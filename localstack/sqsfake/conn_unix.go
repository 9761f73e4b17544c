//go:build linux || darwin

package sqsfake

import (
	"net"
	"syscall"
)

// closedByPeer peeks at c without consuming or waiting: a read of zero
// bytes is the peer's close (FIN), and a reset is one too. Data waiting
// (a pipelined request) or nothing yet means the peer is still there.
func closedByPeer(c net.Conn) bool {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return false
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	gone := false
	_ = raw.Control(func(fd uintptr) {
		var b [1]byte
		n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		gone = (n == 0 && err == nil) || err == syscall.ECONNRESET
	})
	return gone
}
