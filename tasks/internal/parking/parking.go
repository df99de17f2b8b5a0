// Package parking keeps the tasks a process sent back to their queue
// because their agent held its share (of the turn cap, of the process's
// work slots), so that a slot the agent frees here brings one back at once
// and the rest wait long, instead of coming back every second to be sent
// back again.
//
// Before, each such task came back every one to four seconds: an agent with
// 2,000 work jobs queued past its share cost Redis about 13,000 commands a
// second while it waited, for nothing. Now a task's wait doubles each time
// this process sends it back (First, then twice that, … up to Most), and
// each slot its agent frees on this process runs the oldest of them at
// once. A slot of the agent freed on another process, where nothing of it
// is parked, brings one back from here too (JoinFleet): a turn's, since the
// turn cap is the fleet's; a work slot's, since that process has room for
// the agent (any process may fetch the task, and one at its share parks it
// again).
package parking

import (
	"errors"
	"sync"
	"time"

	"github.com/bgjobs/bgjobs/metrics"
	"github.com/bgjobs/bgjobs/tasks/internal/engine"
	"github.com/bgjobs/bgjobs/tasks/internal/registry/reclaim"
)

// Waits of a task sent back: the first, doubled each time after, up to the
// most. First stays short so an answer that changes soon (an agent found
// alone) is seen soon; Most bounds what a slot freed on another process
// waits for a task parked here.
const (
	First = 2 * time.Second
	Most  = 30 * time.Second
)

// maxParked bounds the tasks one process remembers; past it a task sent
// back waits Most, remembered by its queue alone.
const maxParked = 100_000

// tries is how many parked tasks one freed slot tries to bring back: an
// entry may be stale (its task cancelled, or back in the queue already).
const tries = 3

// heardFor is how long a process keeps another's word that it parked a
// task of an agent: a parked task comes back within Most, and is parked
// and told of again while its agent still holds its share.
const heardFor = 2 * Most

type entry struct {
	agent string
	sent  int  // how often this process sent it back
	lined bool // in its agent's line
}

// Lot is one share's parked tasks on this process.
type Lot struct {
	share string
	run   func(id string) error // reclaim.Store.Unpark on the share's queue
	first time.Duration
	most  time.Duration

	mu      sync.Mutex
	entries map[string]*entry   // task id →
	line    map[string][]string // agent → task ids, oldest first

	// The fleet's news (JoinFleet); tell is nil for a lot on its own.
	tell                    func(topic, msg string)
	parkedTo, freedTo       string
	now                     func() time.Time
	toldParked, heardParked map[string]time.Time // agent → when
	// room says this process has a slot for agent now (work slots are each
	// process's own); nil for a share whose slots are the fleet's.
	room func(agent string) bool
	// offered: tasks brought back here at another process's word, and how
	// often. Parked here again (this process fetched it first), such a task
	// is told of at once, not once per First, up to maxOffers times.
	offered map[string]int
}

// maxOffers bounds how often one task goes back to its queue at other
// processes' word before it waits as any other: each time, any process
// may fetch it, this one among them.
const maxOffers = 8

// New returns the lot of a share ("turn" or "work", as metrics name it)
// whose tasks run brings back to their queue.
func New(share string, run func(id string) error) *Lot {
	return &Lot{share: share, run: run, first: First, most: Most, entries: map[string]*entry{}, line: map[string][]string{}, now: time.Now}
}

// Teller carries news between the processes of a namespace (the pipeline
// writer's Tell and Heard).
type Teller interface {
	Tell(topic, msg string)
	Heard(topic string, fn func(msg string))
}

// JoinFleet shares the lot's news with the same lots of the other
// processes, on topics named after prefix: a slot one process frees may
// run a task another parked. The lot tells the others when it parks a task of an agent (at
// most once per First for each agent), and tells them of a slot of that
// agent freed here, with nothing of it parked here, only when one of them
// said it parked a task of that agent within heardFor. Before, every turn's
// end was told to the fleet, a PUBLISH per turn, almost always for nothing,
// and a work task parked on one process waited out its wait (up to Most)
// while another process had room for its agent.
// Call it before the worker starts.
//
// With room (work, whose slots are each process's own), a slot is free
// here for an agent whenever room says so, whichever agent's job ended: a
// process with room answers the word that an agent's task is parked
// elsewhere at once, and tells of room for such an agent when any of its
// slots frees.
func (l *Lot) JoinFleet(t Teller, prefix string, room func(agent string) bool) {
	l.tell, l.parkedTo, l.freedTo, l.room = t.Tell, prefix+"-parked", prefix+"-freed", room
	l.toldParked, l.heardParked, l.offered = map[string]time.Time{}, map[string]time.Time{}, map[string]int{}
	t.Heard(l.parkedTo, func(agent string) {
		l.mu.Lock()
		remember(l.heardParked, agent, l.now(), heardFor)
		l.mu.Unlock()
		if room != nil && room(agent) {
			l.tell(l.freedTo, agent)
		}
	})
	t.Heard(l.freedTo, func(agent string) {
		if id, _ := l.bringBack(agent); id != "" {
			l.mu.Lock()
			defer l.mu.Unlock()
			if len(l.offered) >= maxParked {
				clear(l.offered)
			}
			l.offered[id]++
		}
	})
}

// remember records agent's news at now, first dropping what is older than
// keep, so the map holds only the agents heard of lately.
func remember(m map[string]time.Time, agent string, now time.Time, keep time.Duration) {
	if len(m) >= 1024 {
		for a, at := range m {
			if now.Sub(at) > keep {
				delete(m, a)
			}
		}
	}
	m[agent] = now
}

// Waits sets the first and the longest wait (tests lengthen them, to show
// that a freed slot, not a wait, brought a task back). Call it before the
// lot is used.
func (l *Lot) Waits(first, most time.Duration) { l.first, l.most = first, most }

// Park records that agent's task id was sent back with err (an
// engine.ErrLater) and returns err with the task's wait.
func (l *Lot) Park(agent, id string, err error) error {
	metrics.SentBack.WithLabelValues(l.share).Inc()
	wait, tell := l.park(agent, id)
	if tell {
		l.tell(l.parkedTo, agent) // outside the lock: the writer's queue may be full
	}
	return engine.LaterBy(err, wait)
}

// park records the task and returns its wait, and whether to tell the
// fleet that agent has a task parked here.
func (l *Lot) park(agent, id string) (wait time.Duration, tell bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e := l.entries[id]
	if e == nil {
		if len(l.entries) >= maxParked {
			return l.most, false
		}
		e = &entry{agent: agent}
		l.entries[id] = e
	}
	wait = min(l.first<<min(e.sent, 16), l.most)
	e.sent++
	if !e.lined {
		e.lined = true
		l.line[agent] = append(l.line[agent], id)
	}
	if l.tell != nil {
		now := l.now()
		offers, offered := l.offered[id]
		if at, ok := l.toldParked[agent]; !ok || now.Sub(at) >= First || offered && offers < maxOffers {
			remember(l.toldParked, agent, now, First)
			tell = true
		}
	}
	return wait, tell
}

// Took forgets a task that got its slot.
func (l *Lot) Took(id string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.forget(id)
	delete(l.offered, id)
}

// forget drops a parked task; the lock is held.
func (l *Lot) forget(id string) {
	if e := l.entries[id]; e != nil {
		e.lined = false // its place in the line is skipped when reached
		delete(l.entries, id)
	}
}

// Free brings back the oldest task of agent parked here: one of the
// agent's slots just freed. A Redis round trip for each task it tries (at
// most tries), none when the agent has nothing parked here. With nothing
// parked here, a lot in a fleet tells the others, if one of them parked a
// task of agent lately.
func (l *Lot) Free(agent string) {
	if _, found := l.bringBack(agent); found || l.tell == nil {
		return
	}
	if to := l.roomFor(agent); to != "" {
		l.tell(l.freedTo, to)
	}
}

// roomFor is the agent to tell of a slot freed here: agent itself if
// another process parked a task of it lately; with room, else another such
// agent this process has room for; "" for none.
func (l *Lot) roomFor(agent string) string {
	l.mu.Lock()
	now := l.now()
	fresh := func(a string) bool { at, ok := l.heardParked[a]; return ok && now.Sub(at) < heardFor }
	var heard []string
	if l.room != nil {
		for a := range l.heardParked {
			if a != agent && fresh(a) {
				heard = append(heard, a)
			}
		}
	}
	self := fresh(agent)
	l.mu.Unlock()
	if self && (l.room == nil || l.room(agent)) {
		return agent
	}
	for _, a := range heard {
		if l.room(a) {
			return a
		}
	}
	return ""
}

// bringBack brings back the oldest task of agent parked here: it returns
// the task's id, and whether it found one (brought back, or kept for a
// later slot).
func (l *Lot) bringBack(agent string) (brought string, found bool) {
	relined := ""
	for range tries {
		id, ok := l.next(agent)
		if !ok {
			return "", found
		}
		if id == relined { // nothing else parked here
			l.reline(id)
			return "", true
		}
		switch err := l.run(id); {
		case err == nil, errors.Is(err, reclaim.ErrTaskQueued):
			// Back in its queue (the queued one: its wait ran out), where
			// any process may fetch it: forgotten here, else a task another
			// process runs would be remembered here for good (its offers
			// stay counted).
			l.mu.Lock()
			l.forget(id)
			l.mu.Unlock()
			return id, true
		case errors.Is(err, reclaim.ErrTaskRunning):
			// Sent back a moment ago and not yet in the retry set, or
			// running elsewhere: it keeps a place, at the end.
			l.reline(id)
			relined, found = id, true
		case errors.Is(err, reclaim.ErrTaskGone), errors.Is(err, reclaim.ErrTaskNotWaiting):
			l.Took(id) // ended, archived: nothing to bring back
		default:
			return "", true // Redis did not answer: the waits bring tasks back
		}
	}
	return "", found
}

// next takes the oldest task of agent's line that is still parked.
func (l *Lot) next(agent string) (string, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	ids := l.line[agent]
	defer func() {
		if len(ids) == 0 {
			delete(l.line, agent)
		} else {
			l.line[agent] = ids
		}
	}()
	for len(ids) > 0 {
		id := ids[0]
		ids = ids[1:]
		if e := l.entries[id]; e != nil && e.lined {
			e.lined = false
			return id, true
		}
	}
	return "", false
}

func (l *Lot) reline(id string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if e := l.entries[id]; e != nil && !e.lined {
		e.lined = true
		l.line[e.agent] = append(l.line[e.agent], id)
	}
}

// Parked is how many tasks this process remembers sending back.
func (l *Lot) Parked() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.entries)
}
