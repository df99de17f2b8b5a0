// Package turncap holds running turns to the global cap
// (BGJOBS_TURN_CONCURRENCY) and each agent to its share of it
// (BGJOBS_TURN_SHARE), so one tenant whose agent never answers cannot hold
// every slot while the others' turns wait.
package turncap

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bgjobs/bgjobs/tasks/internal/engine"
	"github.com/bgjobs/bgjobs/tasks/internal/registry"
)

// lease is how long a slot survives without renewal: a worker that dies
// frees its slot within this time.
const lease = 30 * time.Second

// ErrShareFull sends a turn back to its queue without counting it as a
// failure: its agent holds its share of the cap. Waiting in the worker
// would hold one of the few turn workers, and the other agents' turns
// queued behind it could not be fetched at all.
var ErrShareFull = fmt.Errorf("%w: the agent holds its share of the turn cap", engine.ErrLater)

// Cap hands out slots: a zset of "<agent>/<job id>" → lease expiry, so an
// agent's share is counted in the same script that takes a slot.
type Cap struct {
	rdb          redis.UniversalClient
	k            registry.Keys
	limit, share int
	poll         time.Duration
	lone         func(context.Context) bool
	now          func() time.Time
	log          *slog.Logger
}

// New returns a Cap of limit slots with share per agent (the whole cap
// while lone says the namespace has one agent); a turn waiting for a slot
// under the cap looks again after poll, backing off to 1 s.
func New(rdb redis.UniversalClient, k registry.Keys, limit, share int, poll time.Duration, lone func(context.Context) bool, now func() time.Time, log *slog.Logger) *Cap {
	return &Cap{rdb: rdb, k: k, limit: limit, share: share, poll: poll, lone: lone, now: now, log: log}
}

// Answers of acquire.
const (
	capFull   = 0 // every slot of the cap is held
	held      = 1 // the job holds a slot
	shareFull = 2 // the agent holds its share of the cap
)

func member(agent, id string) string { return agent + "/" + id }

// acquire takes (or renews) a slot for an agent's job, dropping lapsed
// slots first (acquireTurnCmd).
func (c *Cap) acquire(ctx context.Context, agent, id string, share int) (int, error) {
	now := c.now()
	return acquireTurnCmd.Run(ctx, c.rdb, []string{c.k.TurnSem()},
		member(agent, id), now.UnixMilli(), now.Add(lease).UnixMilli(), c.limit, share, agent+"/").Int()
}

// Wait blocks until the job holds a slot and returns the function that
// frees it; the slot's lease is renewed while the turn runs. When the
// agent holds its share it returns ErrShareFull at once.
func (c *Cap) Wait(ctx context.Context, agent, id string) (func(), error) {
	delay := c.poll
	for {
		got, err := c.acquire(ctx, agent, id, c.shareOf(ctx))
		if got == held && err == nil {
			break
		}
		if got == shareFull && err == nil {
			return nil, ErrShareFull
		}
		if err != nil && ctx.Err() == nil {
			c.log.Warn("turn slot", slog.String("job_id", id), slog.Any("err", err))
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(delay):
		}
		delay = min(delay*2, time.Second)
	}
	renewCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(lease / 3)
		defer tick.Stop()
		for {
			select {
			case <-renewCtx.Done():
				return
			case <-tick.C:
				_ = renewTurnCmd.Run(renewCtx, c.rdb, []string{c.k.TurnSem()}, member(agent, id), c.now().Add(lease).UnixMilli()).Err()
			}
		}
	})
	return func() {
		stop()
		wg.Wait()
		c.rdb.ZRem(context.WithoutCancel(ctx), c.k.TurnSem(), member(agent, id))
	}, nil
}

// shareOf is an agent's share: the whole cap when it is the namespace's
// only agent (nobody to starve), else the configured share.
func (c *Cap) shareOf(ctx context.Context) int {
	if c.share >= c.limit || c.lone(ctx) {
		return c.limit
	}
	return c.share
}
