// Package workshare holds each agent to its share of this process's work
// slots (BGJOBS_WORK_SHARE of BGJOBS_WORK_CONCURRENCY), so one tenant's long
// work jobs (a delegate to an agent that never answers, an hour-long echo)
// cannot hold every slot while other tenants' work waits queued behind them.
//
// The slots are the process's own (asynq runs that many work tasks at
// once), so they are counted here, in memory: no Redis round trip for a
// job, and a process that dies frees its count with it.
package workshare

import (
	"context"
	"fmt"
	"sync"

	"github.com/bgjobs/bgjobs/tasks/internal/engine"
	"github.com/bgjobs/bgjobs/tasks/internal/parking"
)

// ErrShareFull sends a work task back to its queue without counting it as
// a failure: its agent holds its share of this process's slots. Meanwhile
// the freed worker fetches the next task, which may be another agent's.
// The task is parked (package parking): one of its agent's slots freed
// here brings it back, else its wait does.
var ErrShareFull = fmt.Errorf("%w: the agent holds its share of this process's work slots", engine.ErrLater)

// Slots counts the work jobs each agent runs on this process.
type Slots struct {
	limit, share int
	lone         func(context.Context) bool
	parked       *parking.Lot

	mu   sync.Mutex
	held map[string]int
}

// New returns the counter of a process with limit work slots, share of
// them per agent; lone says the namespace has one agent, who may then use
// every slot; parked keeps the tasks sent back.
func New(limit, share int, lone func(context.Context) bool, parked *parking.Lot) *Slots {
	return &Slots{limit: limit, share: min(share, limit), lone: lone, parked: parked, held: map[string]int{}}
}

// Take counts agent's work task id as running, to be uncounted by Release;
// ErrShareFull (with the task's wait) when the agent already runs its
// share and the namespace has other agents.
func (s *Slots) Take(ctx context.Context, agent, id string) error {
	s.mu.Lock()
	under := s.held[agent] < s.share || s.share >= s.limit
	if under {
		s.held[agent]++ // counted in the same lock as the check: never past the share
	}
	s.mu.Unlock()
	if !under {
		// Whether the agent is alone is asked only past its share, so a
		// job under it never waits on Redis.
		if !s.lone(ctx) {
			return s.parked.Park(agent, id, ErrShareFull)
		}
		s.mu.Lock()
		s.held[agent]++
		s.mu.Unlock()
		// Alone now, the agent may use every slot: what it has parked
		// here comes back one more at each such start, not at its wait.
		defer s.parked.Free(agent)
	}
	s.parked.Took(id)
	return nil
}

// Release uncounts a job Take counted, and brings back a task of the
// agent parked here, if any.
func (s *Slots) Release(agent string) {
	s.mu.Lock()
	if s.held[agent]--; s.held[agent] <= 0 {
		delete(s.held, agent)
	}
	s.mu.Unlock()
	s.parked.Free(agent)
}

// Room says a work job of agent would get a slot here now: a slot is free
// and the agent is under its share. It is asked only when another process
// parks a job or a slot frees with nothing parked here, so it sums the
// counts (at most one an agent per slot) rather than keep a total.
func (s *Slots) Room(agent string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	taken := 0
	for _, n := range s.held {
		taken += n
	}
	return taken < s.limit && (s.held[agent] < s.share || s.share >= s.limit)
}
