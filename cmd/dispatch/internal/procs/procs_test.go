package procs_test

import (
	"testing"

	"github.com/dispatchhq/dispatch/cmd/dispatch/internal/procs"
)

// mid is a use between idle and busy.
const mid = (procs.Idle + procs.Busy) / 2

type step struct {
	use  float64 // cores
	want int     // Ps
	why  string
}

func TestTheGovernorDropsToOnePOnlyAfterAQuietSpellAndComesBackAtOnce(t *testing.T) {
	g := procs.NewGovernor(4)
	steps := []step{
		{0.1, 1, "a process starts on one P"},
		{0.9, 4, "busy: the default at once"},
		{0.1, 4, "one quiet sample is not a quiet spell"},
	}
	for range int(procs.Quiet/procs.Sample) - 2 {
		steps = append(steps, step{0.1, 4, "still within the spell"})
	}
	steps = append(steps, []step{
		{0.1, 1, "a whole quiet spell: one P"},
		{mid, 1, "between idle and busy: stays on one P"},
		{procs.Busy, 4, "busy: back to the default at once"},
		{mid, 4, "between idle and busy: stays on the default"},
		{0.1, 4, "a quiet sample after a middling one starts the spell again"},
	}...)
	for i, s := range steps {
		if got := g.Next(s.use, 0, procs.Sample); got != s.want {
			t.Fatalf("step %d (use %.2f cores): %d Ps, want %d: %s", i, s.use, got, s.want, s.why)
		}
	}
}

func TestAMiddlingSampleBreaksTheQuietSpell(t *testing.T) {
	g := procs.NewGovernor(2)
	if got := g.Next(procs.Busy, 0, procs.FastSample); got != 2 {
		t.Fatalf("busy: %d Ps, want 2", got)
	}
	spell := int(procs.Quiet / procs.Sample) // samples in a quiet spell
	for i := range 3 * spell {
		use := 0.1
		if i%spell == spell-2 {
			use = mid
		}
		if got := g.Next(use, 0, procs.Sample); got != 2 {
			t.Fatalf("sample %d: dropped to %d Ps although no quiet spell of %s ran whole", i, got, procs.Quiet)
		}
	}
}

// On one P the governor looks often, so that a burst has the cores within
// FastSample; on more it looks less often.
func TestTheGovernorLooksMoreOftenOnOneP(t *testing.T) {
	g := procs.NewGovernor(2)
	if got := g.Interval(); got != procs.FastSample {
		t.Errorf("on one P: samples of %s, want %s", got, procs.FastSample)
	}
	g.Next(procs.Busy, 0, procs.FastSample)
	if got := g.Interval(); got != procs.Sample {
		t.Errorf("on the default: samples of %s, want %s", got, procs.Sample)
	}
}

// A process the machine starves (it gets less than half a core) keeps its
// CPU use low while its goroutines queue for the one P: the wait brings
// the default back, and a middling wait keeps it there.
func TestAStarvedProcessHasItsCoresBackThoughItsCPUUseIsLow(t *testing.T) {
	g := procs.NewGovernor(2)
	steps := []struct {
		use, wait float64
		want      int
		why       string
	}{
		{0.2, 0.1, 1, "little use, little wait: one P"},
		{0.2, procs.Busy, 2, "goroutines waiting for the one P: the default at once"},
	}
	for range 2 * int(procs.Quiet/procs.Sample) {
		steps = append(steps, struct {
			use, wait float64
			want      int
			why       string
		}{0.1, mid, 2, "still waiting between idle and busy: no quiet spell"})
	}
	for i, s := range steps {
		if got := g.Next(s.use, s.wait, procs.Sample); got != s.want {
			t.Fatalf("step %d (use %.2f cores, wait %.2f): %d Ps, want %d: %s", i, s.use, s.wait, got, s.want, s.why)
		}
	}
}
