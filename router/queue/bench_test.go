package queue_test

import (
	"context"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/dispatchhq/dispatch/router/queue"
	"github.com/dispatchhq/dispatch/router/sqstest"
)

// BenchmarkQueueCycle is one batch of ten messages through the queue as the
// service drives it: a SendMessageBatch (the publisher), a ReceiveMessage
// (the router) and a DeleteMessageBatch (the deleter), against the SQS
// stand-in. Per op: three calls, ten messages. cpu-µs/op is this process's
// CPU (getrusage): the client's side, without the stand-in's.
func BenchmarkQueueCycle(b *testing.B) {
	q := sqstest.New(b, 30*time.Second).Open(b)
	ctx := context.Background()
	entries := make([]queue.Entry, 10)
	receipts := make([]string, 0, 10)
	b.ReportAllocs()
	var ru0 syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
	for i := 0; b.Loop(); i++ {
		for j := range entries {
			id := strconv.Itoa(i*10 + j)
			entries[j] = queue.Entry{Body: `{"job_id":"` + id + `"}`, GroupID: "g" + strconv.Itoa(j), DeduplicationID: id}
		}
		if _, err := q.SendBatch(ctx, entries); err != nil {
			b.Fatal(err)
		}
		msgs, err := q.Receive(ctx, 10, time.Second, 30*time.Second, "")
		if err != nil {
			b.Fatal(err)
		}
		receipts = receipts[:0]
		for _, m := range msgs {
			receipts = append(receipts, m.Receipt)
		}
		if err := q.DeleteBatch(ctx, receipts); err != nil {
			b.Fatal(err)
		}
	}
	var ru1 syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
	cpu := time.Duration(ru1.Utime.Nano() + ru1.Stime.Nano() - ru0.Utime.Nano() - ru0.Stime.Nano())
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/op")
}
