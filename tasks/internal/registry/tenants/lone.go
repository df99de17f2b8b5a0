package tenants

import (
	"context"
	"sync"
	"time"
)

// loneCheck is how long the answer to "is this the namespace's only
// agent?" is kept: agents are registered seldom, and a job asks often.
const loneCheck = 5 * time.Second

// Lone answers whether the namespace has at most one configured agent.
// A share of something every agent uses (the turn cap, a process's work
// slots) protects nobody then, and the lone agent may use all of it.
type Lone struct {
	s   *Store
	now func() time.Time

	mu    sync.Mutex
	until time.Time
	lone  bool
}

// Lone returns the namespace's lone-agent answer, read from Redis at most
// every loneCheck; now is the clock.
func (s *Store) Lone(now func() time.Time) *Lone { return &Lone{s: s, now: now} }

// Is reports whether the namespace has at most one agent. Until the count
// is first read, and while Redis does not answer, the last answer stands
// (at first: not lone, so shares hold).
func (l *Lone) Is(ctx context.Context) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.now().After(l.until) {
		n, err := l.s.rdb.SCard(ctx, l.s.k.Agents()).Result()
		if err == nil {
			l.lone = n <= 1
			l.until = l.now().Add(loneCheck)
		}
	}
	return l.lone
}
