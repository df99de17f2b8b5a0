package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/bgjobs/bgjobs"
	"github.com/bgjobs/bgjobs/tasks"
)

// drainAmidLoad times a session's drain (one finished job each) on its own,
// then again while 100,000 finished, undrained jobs of 1,000 other
// sessions wait in the same Redis: a drain's cost is its own session's.
func drainAmidLoad(ctx context.Context, m *tasks.Manager, out io.Writer) error {
	alone, err := drainLatencies(ctx, m, "drain-alone", 200)
	if err != nil {
		return err
	}
	echo := json.RawMessage(`{"text":"x"}`)
	var last string
	for b := range 100 {
		specs := make([]tasks.SpawnRequest, 1000)
		for i := range specs {
			specs[i] = tasks.SpawnRequest{Kind: bgjobs.KindWork, Description: "load", Work: &bgjobs.WorkSpec{Type: "echo", Args: echo}}
		}
		res, err := m.SpawnBatch(ctx, "quiet", fmt.Sprintf("load-%d", b), specs)
		if err != nil {
			return err
		}
		last = res.Jobs[len(res.Jobs)-1].ID
	}
	deadline := time.Now().Add(5 * time.Minute)
	for {
		j, err := m.Get(ctx, "quiet", last)
		if err != nil {
			return err
		}
		if j.Status.Terminal() {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("drain bench: the load did not finish")
		}
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(2 * time.Second) // the last batches settle
	amid, err := drainLatencies(ctx, m, "drain-amid", 200)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "\na session's drain (one finished job), 200 drains\n")
	fmt.Fprintf(out, "  alone                                   p50 %5.2f ms  p99 %5.2f ms\n", ms(percentile(alone, .5)), ms(percentile(alone, .99)))
	fmt.Fprintf(out, "  amid 100,000 undrained jobs of others   p50 %5.2f ms  p99 %5.2f ms  (goal p99 ≤ 2 ms)\n", ms(percentile(amid, .5)), ms(percentile(amid, .99)))
	return nil
}

func drainLatencies(ctx context.Context, m *tasks.Manager, session string, n int) ([]time.Duration, error) {
	var lat []time.Duration
	for range n {
		j, _, err := m.Spawn(ctx, tasks.SpawnRequest{Agent: "quiet", OriginSession: session, Kind: bgjobs.KindWork,
			Description: "mine", Work: &bgjobs.WorkSpec{Type: "echo", Args: json.RawMessage(`{"text":"x"}`)}})
		if err != nil {
			return nil, err
		}
		for {
			row, err := m.Get(ctx, "quiet", j.ID)
			if err != nil {
				return nil, err
			}
			if row.Status.Terminal() {
				break
			}
			time.Sleep(time.Millisecond)
		}
		t0 := time.Now()
		ns, err := m.Drain(ctx, "quiet", session, "")
		if err != nil {
			return nil, err
		}
		lat = append(lat, time.Since(t0))
		if len(ns) != 1 {
			return nil, fmt.Errorf("drain bench: drained %d, want 1", len(ns))
		}
	}
	return lat, nil
}
