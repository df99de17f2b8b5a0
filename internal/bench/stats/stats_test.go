package stats

import (
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
	"time"
)

func TestGCPercentReadsTheTarget(t *testing.T) {
	saved := debug.SetGCPercent(250)
	t.Cleanup(func() { debug.SetGCPercent(saved) })
	if got := GCPercent(); got != 250 {
		t.Fatalf("GCPercent = %d, want 250", got)
	}
	if PeakRSS() <= 0 || ProcessCPU() <= 0 {
		t.Fatal("rusage not read")
	}
}

func TestSpreadIsTheRangeOfRoundRatios(t *testing.T) {
	if got := Spread([]float64{10, 30, 20}, []float64{20, 30, 10}); got != "rounds 0.50–2.00" {
		t.Errorf("Spread = %q", got)
	}
	// A round one side lacks, or did not measure, is left out; one round
	// alone has no spread.
	if got := Spread([]float64{10, 30, 20}, []float64{0, 30}); got != "" {
		t.Errorf("Spread of one round = %q, want none", got)
	}
	if got := Rates(10, []time.Duration{time.Second, 2 * time.Second}); got[0] != 10 || got[1] != 5 {
		t.Errorf("Rates = %v", got)
	}
}

func TestNotesLeaveOutEmptyRemarks(t *testing.T) {
	if got := Notes("goal ≥ 0.80", "", "rounds 0.7–0.9"); got != "goal ≥ 0.80; rounds 0.7–0.9" {
		t.Fatalf("Notes = %q", got)
	}
	if got := Notes("", ""); got != "" {
		t.Fatalf("Notes of nothing = %q", got)
	}
}

// TestBusyIsTheShareOfTheMachinesCores meters a spell in which this
// process keeps one core spinning: the machine's busy share is at least
// that core's share of all of them, and at most every core.
func TestBusyIsTheShareOfTheMachinesCores(t *testing.T) {
	if _, total := MachineTicks(); total == 0 {
		t.Skip("no /proc/stat on this system")
	}
	meter := Meter(t.Context(), nil)
	for deadline := time.Now().Add(300 * time.Millisecond); time.Now().Before(deadline); {
	}
	c := meter(1)
	if floor := 0.8 / float64(runtime.NumCPU()); c.Busy < floor || c.Busy > 1 {
		t.Fatalf("Busy = %.2f with one of %d cores spinning, want between %.2f and 1", c.Busy, runtime.NumCPU(), floor)
	}
	var out strings.Builder
	c.Print(&out, "spin")
	if !strings.Contains(out.String(), "% busy") {
		t.Errorf("Print leaves out the busy share: %q", out.String())
	}
}
