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
	require.Equal(t, 3, l.Parked(), "a3, a5 and b1 (a4 brought back is forgotten: any process may fetch it)")

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
	require.Zero(t, l.Parked())
}

// fakeFleet is two processes' pipelines: what one tells, the other hears.
type fakeFleet struct {
	told  []string // topic:msg, in order
	heard map[string]func(string)
	peer  *fakeFleet
}

func (f *fakeFleet) Tell(topic, msg string) {
	f.told = append(f.told, topic+":"+msg)
	if fn := f.peer.heard[topic]; fn != nil {
		fn(msg)
	}
}

func (f *fakeFleet) Heard(topic string, fn func(string)) { f.heard[topic] = fn }

// In a fleet, a lot tells the others when it parks an agent's task (once
// per First for each agent), and a slot of the agent freed elsewhere with
// nothing of it parked there brings one back here; a slot freed with
// nothing parked anywhere tells nobody.
func TestLotsInAFleet(t *testing.T) {
	one, two := &fakeFleet{heard: map[string]func(string){}}, &fakeFleet{heard: map[string]func(string){}}
	one.peer, two.peer = two, one
	now := time.Unix(1000, 0)
	var ranOne, ranTwo []string
	a := New("turn", func(id string) error { ranOne = append(ranOne, id); return nil })
	b := New("turn", func(id string) error { ranTwo = append(ranTwo, id); return nil })
	a.now, b.now = func() time.Time { return now }, func() time.Time { return now }
	a.JoinFleet(one, "turn:ns", nil)
	b.JoinFleet(two, "turn:ns", nil)

	b.Free("x")
	a.Free("x")
	require.Empty(t, one.told, "nothing parked anywhere: a freed slot is no news")
	require.Empty(t, two.told)

	a.Park("x", "x1", errFull)
	a.Park("x", "x2", errFull)
	a.Park("y", "y1", errFull)
	require.Equal(t, []string{"turn:ns-parked:x", "turn:ns-parked:y"}, one.told, "once per agent within First")
	now = now.Add(First)
	a.Park("x", "x1", errFull)
	require.Equal(t, "turn:ns-parked:x", one.told[2], "and again after it")

	b.Free("x") // a slot of x frees on process two, which parked nothing
	require.Equal(t, []string{"turn:ns-freed:x"}, two.told)
	require.Equal(t, []string{"x1"}, ranOne, "process one brings back its oldest")
	require.Empty(t, ranTwo)
	a.Free("x") // a slot frees where x has a task parked: no news
	require.Equal(t, []string{"x1", "x2"}, ranOne)
	require.Len(t, one.told, 3)

	b.Free("z")
	require.Len(t, two.told, 1, "nothing of z parked anywhere")
	now = now.Add(heardFor)
	b.Free("y")
	require.Len(t, two.told, 1, "news of y's parked task is too old: its wait has brought it back")
}

// Work slots are each process's own: a process with room for an agent
// answers the word that a task of it is parked elsewhere at once, and
// tells of room for it when any of its slots frees; a task brought back at
// that word and parked again where it was (that process fetched it first)
// is told of again at once, up to maxOffers times.
func TestWorkLotsInAFleet(t *testing.T) {
	one, two := &fakeFleet{heard: map[string]func(string){}}, &fakeFleet{heard: map[string]func(string){}}
	one.peer, two.peer = two, one
	var ranOne []string
	a := New("work", func(id string) error { ranOne = append(ranOne, id); return nil })
	b := New("work", func(id string) error { return nil })
	roomOne, roomTwo := map[string]bool{}, map[string]bool{}
	a.JoinFleet(one, "work:ns", func(agent string) bool { return roomOne[agent] })
	b.JoinFleet(two, "work:ns", func(agent string) bool { return roomTwo[agent] })

	a.Park("x", "x1", errFull)
	require.Equal(t, []string{"work:ns-parked:x"}, one.told)
	require.Empty(t, two.told, "process two is full: no answer")

	roomTwo["x"] = true
	b.Free("y") // a slot of another agent frees on process two
	require.Equal(t, []string{"work:ns-freed:x"}, two.told, "room for x now")
	require.Equal(t, []string{"x1"}, ranOne)

	for i := range maxOffers + 2 {
		a.Park("x", "x1", errFull) // process one fetched it first, and parks it again
		if i < maxOffers-1 {
			require.Len(t, ranOne, i+2, "told at once, answered, brought back (round %d)", i)
		}
	}
	require.Len(t, ranOne, maxOffers, "then it waits as any other")
	a.Took("x1")

	before := len(one.told)
	a.Park("x", "x2", errFull)
	require.Len(t, one.told, before, "another task within First: no news")
	roomTwo["x"] = false
	b.Free("x")
	require.Len(t, two.told, maxOffers, "no room: nothing told")
}
