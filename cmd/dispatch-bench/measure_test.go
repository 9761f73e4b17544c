package main

import (
	"os"
	"runtime"
	"testing"
	"time"
)

// readRSS splits a process's resident set into anonymous memory and file
// pages: 64 MiB allocated and touched show up as anonymous memory, and the
// binary's pages as the rest.
func TestReadRSSSeesAnonymousMemoryApartFromFilePages(t *testing.T) {
	before, ok := readRSS(os.Getpid())
	if !ok {
		t.Fatal("readRSS of this process: no Rss and Anonymous lines")
	}
	if before.anon <= 0 || before.rss <= before.anon {
		t.Fatalf("before: rss %d, anonymous %d; want file pages (the test binary's) besides anonymous memory", before.rss, before.anon)
	}
	const size = 64 << 20
	buf := make([]byte, size)
	for i := 0; i < len(buf); i += 4096 {
		buf[i] = 1
	}
	after, ok := readRSS(os.Getpid())
	runtime.KeepAlive(buf)
	if !ok {
		t.Fatal("readRSS after the allocation failed")
	}
	if grew := after.anon - before.anon; grew < size*9/10 {
		t.Errorf("anonymous memory grew by %d bytes after touching %d; want about that much", grew, size)
	}
	if file := after.rss - after.anon; file <= 0 {
		t.Errorf("file pages %d after the allocation; want the binary's, above 0", file)
	}
}

// The sampler keeps each process's highest sample.
func TestRSSSamplerKeepsTheHighestSample(t *testing.T) {
	s := startRSSSampler([]int{os.Getpid()})
	buf := make([]byte, 32<<20)
	for i := 0; i < len(buf); i += 4096 {
		buf[i] = 1
	}
	now, _ := readRSS(os.Getpid())
	// Two more rounds: the first may have begun before the allocation.
	from := s.rounds.Load()
	deadline := time.Now().Add(10 * time.Second)
	for s.rounds.Load() < from+2 {
		if time.Now().After(deadline) {
			t.Fatal("the sampler took no sample in 10s")
		}
		time.Sleep(rssEvery / 5)
	}
	top := s.highest()[os.Getpid()]
	runtime.KeepAlive(buf)
	if top.anon < now.anon*9/10 {
		t.Errorf("highest sample: anonymous %d; want about %d or more (32 MiB touched)", top.anon, now.anon)
	}
}
