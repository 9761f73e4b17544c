// Package procs runs a process on one P while it is nearly idle and on the
// runtime's default as soon as it is busy.
//
// A Go process with several Ps spends much of its CPU at a low, steady rate
// on waking them: each request readies goroutines, the thread of an idle P
// is woken to look for them (futex calls, context switches), finds little
// and sleeps again. On one P that work is not done; under load one P is not
// enough, and neither is it when the machine is so busy that the process
// gets less than half a core: its goroutines then wait for their one P.
// See docs/decisions/adaptive-procs.md.
package procs

import (
	"context"
	"runtime"
	"time"
)

// The governor's settings. Its CPU use and its goroutines' wait for a P
// are sampled every FastSample on one P (so that a burst has the cores
// within that) and every Sample on more. At Busy cores or more, or Busy
// seconds of waiting per second, it goes back to the default at once;
// below Idle on both for Quiet in a row it goes to one P. The band
// between the two keeps it from flapping: on one P the same load costs
// less CPU than on several.
const (
	FastSample = 50 * time.Millisecond
	Sample     = 250 * time.Millisecond
	Busy       = 0.5
	Idle       = 0.3
	Quiet      = 2 * time.Second
)

// Governor decides, sample by sample, how many Ps the process needs.
type Governor struct {
	max   int // the runtime's default
	cur   int
	quiet time.Duration // below Idle this long, in a row
}

// NewGovernor decides between one P and max, the runtime's default. It
// starts on one: a process starts idle, and is on max within a sample of
// getting busy.
func NewGovernor(max int) *Governor { return &Governor{max: max, cur: 1} }

// Next takes the last sample, which lasted d: the CPU the process used
// (cores) and the time its goroutines waited, runnable, for a P (seconds
// per second, as the runtime records them). It returns the Ps for the
// next sample: max or 1.
//
// Waiting matters on one P when the machine is busy: the process gets
// less than half a core, its CPU use stays low and its goroutines queue
// for the one P, whose thread the system runs only part of the time.
func (g *Governor) Next(use, wait float64, d time.Duration) int {
	switch {
	case use >= Busy || wait >= Busy:
		g.quiet = 0
		g.cur = g.max
	case use < Idle && wait < Idle:
		if g.quiet += d; g.quiet >= Quiet {
			g.cur = 1
		}
	default:
		g.quiet = 0
	}
	return g.cur
}

// Interval is how long the next sample lasts.
func (g *Governor) Interval() time.Duration {
	if g.cur == 1 {
		return FastSample
	}
	return Sample
}

// Adapt runs the governor until ctx ends, then gives the runtime its
// default back. It does nothing when GOMAXPROCS is set (an operator's
// choice stands), when the default is one P already, or where the
// process's CPU time cannot be read.
func Adapt(ctx context.Context, getenv func(string) string) {
	if getenv("GOMAXPROCS") != "" || runtime.GOMAXPROCS(0) == 1 {
		return
	}
	last, ok := processCPU()
	if !ok {
		return
	}
	waits := newWaitMeter()
	g := NewGovernor(runtime.GOMAXPROCS(0))
	runtime.GOMAXPROCS(1)
	lastAt := time.Now()
	t := time.NewTimer(g.Interval())
	defer t.Stop()
	defer runtime.SetDefaultGOMAXPROCS()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			cpu, ok := processCPU()
			if !ok {
				return
			}
			now := time.Now()
			d := now.Sub(lastAt)
			use := (cpu - last).Seconds() / d.Seconds()
			wait := waits.read() / d.Seconds()
			last, lastAt = cpu, now
			was := g.cur
			switch g.Next(use, wait, d) {
			case was:
			case 1:
				runtime.GOMAXPROCS(1)
			default:
				// The default may have moved since (a new CPU limit).
				runtime.SetDefaultGOMAXPROCS()
				g.max = runtime.GOMAXPROCS(0)
				g.cur = g.max
			}
			t.Reset(g.Interval())
		}
	}
}
