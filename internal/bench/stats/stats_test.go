package stats

import (
	"runtime/debug"
	"testing"
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
