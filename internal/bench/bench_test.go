package bench

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/bgjobs/bgjobs/internal/testenv"
)

// TestOnlyRunsThePhasesNamed runs the bench as someone profiling one phase
// would: the phases named run and are printed, the others are not, and a
// ratio appears only when both of its phases ran.
func TestOnlyRunsThePhasesNamed(t *testing.T) {
	env := testenv.New(t)
	var out bytes.Buffer
	o := Options{RedisURL: env.URL, Jobs: 100, Concurrency: 8, Clients: 4, Poll: 10 * time.Millisecond, Rounds: 1,
		Only: []string{"asynq", "e2e"}}
	if err := Run(context.Background(), o, &out); err != nil {
		t.Fatalf("bench: %v\n%s", err, out.String())
	}
	got := out.String()
	for _, want := range []string{"raw asynq   (enqueue", "bgjobs      (HTTP spawn", "ratio bgjobs/asynq: "} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
	for _, unwanted := range []string{"split like bgjobs", "one work fetch loop", "what the split gives", "logging at info", "what logging", "spawn alone", "workers alone", "halves one after the other", "cluster", "batch joins"} {
		if strings.Contains(got, unwanted) {
			t.Errorf("output has %q, a phase not asked for:\n%s", unwanted, got)
		}
	}
}

func TestOnlyRefusesAnUnknownPhase(t *testing.T) {
	err := Run(context.Background(), Options{Only: []string{"e2e", "ee2"}}, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), `unknown phase "ee2"`) {
		t.Fatalf("err = %v, want the unknown phase named", err)
	}
}
