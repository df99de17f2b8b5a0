package parking

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bgjobs/bgjobs/tasks/internal/engine"
	"github.com/bgjobs/bgjobs/tasks/internal/registry/reclaim"
)

var errFull = fmt.Errorf("%w: share full", engine.ErrLater)

// wait is the wait asynq gives a task sent back with err.
func wait(t *testing.T, err error) time.Duration {
	t.Helper()
	require.ErrorIs(t, err, errFull)
	var l interface{ After() time.Duration }
	require.True(t, errors.As(err, &l))
	return l.After()
}

// A task sent back again and again waits longer each time, up to Most; a
// freed slot brings back its agent's oldest parked task, skipping those
// that got a slot meanwhile or are gone, and keeps the place of one still
// on its way to the retry set.
func TestLot(t *testing.T) {
	answers := map[string]error{}
	var ran []string
	l := New("work", func(id string) error { ran = append(ran, id); return answers[id] })

	var waits []time.Duration
	for range 6 {
		waits = append(waits, wait(t, l.Park("a", "a1", errFull)))
	}
	require.Equal(t, []time.Duration{2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second, 30 * time.Second, 30 * time.Second}, waits)
	require.Equal(t, 1, l.Parked(), "one task, however often sent back")

	for _, id := range []string{"a2", "a3", "a4", "a5"} {
		require.Equal(t, First, wait(t, l.Park("a", id, errFull)))
	}
	require.Equal(t, First, wait(t, l.Park("b", "b1", errFull)))
	l.Took("a1") // fetched at its wait's end and given a slot
	answers["a2"] = reclaim.ErrTaskGone
	answers["a3"] = reclaim.ErrTaskRunning
	l.Free("a")
	require.Equal(t, []string{"a2", "a3", "a4"}, ran, "a1 took a slot, a2 is gone, a3 not yet back: a4 comes")
	require.Equal(t, 4, l.Parked(), "a3, a4 (brought back, remembered until it takes a slot), a5 and b1")

	ran = nil
	delete(answers, "a3")
	l.Free("a")
	require.Equal(t, []string{"a5"}, ran)
	l.Free("a")
	require.Equal(t, []string{"a5", "a3"}, ran, "a3 kept its place at the end")
	ran = nil
	l.Free("a")
	require.Empty(t, ran, "nothing of a's is parked")

	answers["b1"] = reclaim.ErrTaskRunning
	l.Free("b")
	require.Equal(t, []string{"b1"}, ran, "a lone task still on its way is tried once")
	answers["b1"] = nil
	l.Free("b")
	require.Equal(t, []string{"b1", "b1"}, ran, "and still parked")
}
