//go:build linux || darwin

package sqsfake

import (
	"context"
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
	if _, err := client.Write([]byte("GET / HTTP/1.1\r\n")); err != nil {
		t.Fatal(err)
	}
	if clientGone(ctx) {
		t.Error("a client whose bytes wait unread is gone")
	}
	var b [64]byte
	if _, err := server.Read(b[:]); err != nil { // the peek consumed nothing
		t.Fatalf("read after the peeks: %v", err)
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
