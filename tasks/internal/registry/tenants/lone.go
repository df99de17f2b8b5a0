package tenants

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
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
// answer needs, in one round trip. The two sets are apart on a cluster, so
// no SUNION.
func (s *Store) agentCount(ctx context.Context) (int, error) {
	keys := []string{s.k.Agents(), s.k.Spawners()}
	var cards []*redis.IntCmd
	var some []*redis.StringCmd
	if _, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, key := range keys {
			cards = append(cards, p.SCard(ctx, key))
			some = append(some, p.SRandMember(ctx, key))
		}
		return nil
	}); err != nil && !errors.Is(err, redis.Nil) {
		return 0, err
	}
	seen := map[string]bool{}
	for i := range keys {
		switch n := cards[i].Val(); {
		case n > 1:
			return 2, nil
		case n == 1:
			seen[some[i].Val()] = true
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
