//go:build linux || darwin

package sqsfake

import (
	"context"
	"io"
	"net"
	"testing"
	"time"
)

// A long poll tells its client's close from the connection itself: not
// while the client is there (waiting, or with data not yet read), at once
// when it has closed, and never without ConnContext.
func TestClientGoneSeesTheClientsClose(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer server.Close()
	ctx := ConnContext(context.Background(), server)
	if clientGone(ctx) {
		t.Error("a client that waits is gone")
	}
	const req = "GET / HTTP/1.1\r\n"
	if _, err := client.Write([]byte(req)); err != nil {
		t.Fatal(err)
	}
	// Read the first bytes, so that the rest is known to wait unread.
	b := make([]byte, len(req))
	if _, err := io.ReadFull(server, b[:4]); err != nil {
		t.Fatal(err)
	}
	if clientGone(ctx) {
		t.Error("a client whose bytes wait unread is gone")
	}
	_ = server.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(server, b[4:]); err != nil || string(b) != req {
		t.Fatalf("after the peek the server read %q (%v), want %q: the peek consumed bytes", b, err, req)
	}
	client.Close()
	deadline := time.Now().Add(5 * time.Second)
	for !clientGone(ctx) {
		if time.Now().After(deadline) {
			t.Fatal("a client that closed is not gone within 5 s")
		}
		time.Sleep(time.Millisecond)
	}
	if clientGone(context.Background()) {
		t.Error("without ConnContext a poll is told its client has gone")
	}
}
