package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// addAttempt writes an attempt row as the processor would have.
func addAttempt(t *testing.T, pool *pgxpool.Pool, id int64, at time.Time, status string, millis int64) {
	t.Helper()
	_, err := pool.Exec(context.Background(), `
		INSERT INTO dispatch_attempt (id, job_id, attempt_number, attempted_at, completed_at, duration_millis, status)
		VALUES ($1, $1, 1, $2, $2, $3, $4)`, id, at, millis, status)
	if err != nil {
		t.Fatal(err)
	}
}

func TestStatsCountsOutcomesAndPercentilesPerBucket(t *testing.T) {
	st, pool := setup(t)
	now := time.Date(2026, 11, 22, 14, 30, 20, 0, time.UTC)
	id := int64(1)
	next := func() int64 { id++; return id }
	// 14:30 (now's bucket): 3 successes of 10, 20, 30 ms and a timeout of 1000 ms.
	for _, ms := range []int64{10, 20, 30} {
		addAttempt(t, pool, next(), now.Add(-10*time.Second), "SUCCESS", ms)
	}
	addAttempt(t, pool, next(), now.Add(-5*time.Second), "TIMEOUT", 1000)
	// 14:28: a failure and a network error.
	addAttempt(t, pool, next(), time.Date(2026, 11, 22, 14, 28, 59, 0, time.UTC), "FAILURE", 50)
	addAttempt(t, pool, next(), time.Date(2026, 11, 22, 14, 28, 0, 0, time.UTC), "NETWORK_ERROR", 5)
	// Outside the window (older than 10 minutes): not counted.
	addAttempt(t, pool, next(), time.Date(2026, 11, 22, 14, 20, 59, 0, time.UTC), "SUCCESS", 7)

	s, err := st.Stats(context.Background(), now, 10*time.Minute, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if want := time.Date(2026, 11, 22, 14, 21, 0, 0, time.UTC); !s.From.Equal(want) {
		t.Errorf("from = %v, want %v", s.From, want)
	}
	if len(s.Buckets) != 10 {
		t.Fatalf("%d buckets, want 10 (empty ones included)", len(s.Buckets))
	}
	last := s.Buckets[9]
	if !last.Start.Equal(time.Date(2026, 11, 22, 14, 30, 0, 0, time.UTC)) {
		t.Errorf("last bucket starts %v", last.Start)
	}
	if last.Success != 3 || last.Timeout != 1 || last.Attempts() != 4 {
		t.Errorf("14:30 bucket = %+v, want 3 successes and 1 timeout", last)
	}
	if last.P50Millis == nil || *last.P50Millis != 25 {
		t.Errorf("14:30 p50 = %v, want 25 (median of 10, 20, 30, 1000)", last.P50Millis)
	}
	if last.P99Millis == nil || *last.P99Millis < 900 {
		t.Errorf("14:30 p99 = %v, want near 1000", last.P99Millis)
	}
	b28 := s.Buckets[7]
	if b28.Failure != 1 || b28.NetworkError != 1 || b28.Success != 0 {
		t.Errorf("14:28 bucket = %+v", b28)
	}
	if empty := s.Buckets[0]; empty.Attempts() != 0 || empty.P50Millis != nil {
		t.Errorf("empty bucket = %+v, want zero counts and no latency", empty)
	}
	if s.Total.Attempts() != 6 || s.Total.Success != 3 {
		t.Errorf("total = %+v, want 6 attempts, 3 successes (the old one outside)", s.Total)
	}
}
