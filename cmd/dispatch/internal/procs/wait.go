package procs

import (
	"math"
	"runtime/metrics"
)

// schedLatencies is the runtime's distribution of the time goroutines
// spent runnable before they ran. The runtime records a sample of them
// (one scheduling in several), so the time read from it is a fraction of
// the whole, the same fraction under any load: the bounds below are set
// against what it reads.
const schedLatencies = "/sched/latencies:seconds"

// waitMeter reads, sample by sample, how much runnable time the runtime
// recorded since the last read.
type waitMeter struct {
	s    []metrics.Sample
	last []uint64 // bucket counts at the last read
}

func newWaitMeter() *waitMeter {
	m := &waitMeter{s: []metrics.Sample{{Name: schedLatencies}}}
	m.read() // the counts so far are not this sample's
	return m
}

// read returns the runnable time recorded since the last read, each
// goroutine counted at its bucket's middle (its bound at an open end).
func (m *waitMeter) read() float64 {
	metrics.Read(m.s) // reuses the histogram it returned before
	if m.s[0].Value.Kind() != metrics.KindFloat64Histogram {
		return 0 // a runtime without the metric
	}
	h := m.s[0].Value.Float64Histogram()
	if len(m.last) != len(h.Counts) {
		m.last = make([]uint64, len(h.Counts))
	}
	var sum float64
	for i, c := range h.Counts {
		n := c - m.last[i]
		m.last[i] = c
		if n == 0 {
			continue
		}
		lo, hi := h.Buckets[i], h.Buckets[i+1]
		switch {
		case math.IsInf(lo, -1):
			sum += float64(n) * hi
		case math.IsInf(hi, 1):
			sum += float64(n) * lo
		default:
			sum += float64(n) * (lo + hi) / 2
		}
	}
	return sum
}
