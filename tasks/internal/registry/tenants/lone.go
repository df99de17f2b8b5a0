package tenants

import (
	"context"
	"sync"
	"time"
)

// loneCheck is how long the answer to "is this the namespace's only
// agent?" is kept: agents are registered seldom, and a job asks often.
const loneCheck = 5 * time.Second

// Lone answers whether the namespace has at most one agent: registered
// (PUT /v1/agents) or having spawned a job, since work needs no
// registration. A share of something every agent uses (the turn cap, a
// process's work slots) protects nobody then, and the lone agent may use
// all of it.
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

// Is reports whether the namespace has at most one agent. While Redis does
// not answer, the last answer stands (at first: not lone, so shares hold).
func (l *Lone) Is(ctx context.Context) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.now().After(l.until) {
		if n, err := l.s.agentCount(ctx); err == nil {
			l.lone = n <= 1
			l.until = l.now().Add(loneCheck)
		}
	}
	return l.lone
}

// agentCount counts the agents registered or spawning, up to 2: all a lone
// answer needs. The two sets are apart on a cluster, so no SUNION.
func (s *Store) agentCount(ctx context.Context) (int, error) {
	seen := map[string]bool{}
	for _, key := range []string{s.k.Agents(), s.k.Spawners()} {
		n, err := s.rdb.SCard(ctx, key).Result()
		if err != nil {
			return 0, err
		}
		if n > 1 {
			return 2, nil
		}
		if n == 1 {
			m, err := s.rdb.SRandMember(ctx, key).Result()
			if err != nil {
				return 0, err
			}
			seen[m] = true
		}
	}
	return len(seen), nil
}

// NoteSpawner records that agent spawns jobs here, once per process: an
// agent that only runs work is registered nowhere else.
func (s *Store) NoteSpawner(ctx context.Context, agent string) {
	if _, done := s.spawners.Load(agent); done {
		return
	}
	if s.rdb.SAdd(ctx, s.k.Spawners(), agent).Err() == nil {
		s.spawners.Store(agent, true)
	}
}
