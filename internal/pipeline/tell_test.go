package pipeline_test

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bgjobs/bgjobs/internal/testenv"
)

// What one process tells reaches the other processes that listen, on the
// topic's receiver only, and not the teller itself; wake-ups on the same
// channel go on as before.
func TestTellReachesTheOtherProcesses(t *testing.T) {
	t.Parallel()
	_, w, _, other := twoProcesses(t)
	var mu sync.Mutex
	heard := map[string][]string{}
	hear := func(who, topic string) func(string) {
		return func(msg string) {
			mu.Lock()
			defer mu.Unlock()
			heard[who] = append(heard[who], topic+" "+msg)
		}
	}
	w.Heard("freed", hear("w", "freed"))
	other.Heard("freed", hear("other", "freed"))
	other.Heard("else", hear("other", "else"))
	for _, p := range []interface{ FetchWaits(time.Duration) }{w, other} {
		p.FetchWaits(time.Minute)
		t.Cleanup(func() { p.FetchWaits(0) })
	}
	got := func() map[string][]string {
		mu.Lock()
		defer mu.Unlock()
		return map[string][]string{"w": append([]string(nil), heard["w"]...), "other": append([]string(nil), heard["other"]...)}
	}
	// A subscription is made asynchronously: tell until the first lands.
	testenv.Eventually(t, 30*time.Second, "the other process hears", func() bool {
		w.Tell("freed", "agent-a")
		return len(got()["other"]) > 0
	})
	other.Tell("freed", "agent-b")
	w.Tell("else", "x/y z")
	testenv.Eventually(t, 30*time.Second, "every message heard", func() bool {
		g := got()
		return len(g["w"]) == 1 && g["other"][len(g["other"])-1] == "else x/y z"
	})
	g := got()
	require.Equal(t, []string{"freed agent-b"}, g["w"], "w hears the other's message, not its own")
	for _, m := range g["other"][:len(g["other"])-1] {
		require.Equal(t, "freed agent-a", m, "the other hears only w's messages, each on its topic")
	}
}
