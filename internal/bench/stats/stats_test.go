package stats

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bgjobs/bgjobs/internal/testenv"
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

// TestAClustersCountersAreSummedOverItsMasters reads a cluster's counters as the
// cluster phase does: a command that lands on any master is counted,
// where INFO through the cluster client reads one node alone.
func TestAClustersCountersAreSummedOverItsMasters(t *testing.T) {
	addrs := testenv.StartRedisCluster(t, 3)
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	defer rdb.Close()
	ctx := t.Context()
	before, err := CommandsProcessed(ctx, rdb)
	if err != nil {
		t.Fatal(err)
	}
	cpu := RedisCPU(ctx, rdb)
	// Keys enough to land on every master.
	for i := range 300 {
		if err := rdb.Set(ctx, fmt.Sprintf("k%d", i), i, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	after, err := CommandsProcessed(ctx, rdb)
	if err != nil {
		t.Fatal(err)
	}
	// Each reading of the counters is itself a command on every master,
	// and the client asks for the slots' layout; one node alone would
	// have counted about a third of the 300.
	if n := after - before; n < 300 || n > 300+5*int64(len(addrs)) {
		t.Fatalf("commands counted = %d, want the 300 sent over %d masters (plus the readings)", n, len(addrs))
	}
	if RedisCPU(ctx, rdb) <= cpu {
		t.Error("the masters' CPU did not grow")
	}
}
