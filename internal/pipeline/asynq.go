package pipeline

import (
	"context"
	"errors"
	"strings"

	"github.com/redis/go-redis/v9"
)

// The asynq interception. asynq runs every queue operation as a Lua script
// (EVALSHA) on the client it is given. AsynqClient hands it a client whose
// scripts (enqueue, dequeue, done, retry, …) share the writer's pipelines
// instead of taking a round trip each; the dequeue is also held while its
// queue is empty (wake.go). Both depend on recognising asynq's scripts by
// their keys: the tests in this package fail if the pinned asynq's enqueue
// or dequeue stop being recognised.

type leadKey struct{}

// Lead carries commands that must go out just before the next asynq script
// call made with its context (a spawn's new row before its task).
type Lead struct {
	queue func(ctx context.Context, p redis.Pipeliner) []redis.Cmder
	// cmds are the lead's commands once queued; read them only after the
	// script call returned without a context error.
	cmds []redis.Cmder
}

// ErrNotSent is a Lead's error when the script call never reached Redis.
var ErrNotSent = errors.New("not sent")

// WithLead returns ctx carrying a lead whose commands queue adds.
func WithLead(ctx context.Context, queue func(ctx context.Context, p redis.Pipeliner) []redis.Cmder) (context.Context, *Lead) {
	l := &Lead{queue: queue}
	return context.WithValue(ctx, leadKey{}, l), l
}

// Err is the first error of the lead's commands, or ErrNotSent if they were
// never sent.
func (l *Lead) Err() error {
	if l.cmds == nil {
		return ErrNotSent
	}
	for _, c := range l.cmds {
		if err := c.Err(); err != nil {
			return err
		}
	}
	return nil
}

// AsynqClient is the Redis client to give asynq's client and servers.
func (w *Writer) AsynqClient() redis.UniversalClient { return asynqClient{w.rdb, w} }

type asynqClient struct {
	redis.UniversalClient
	w *Writer
}

// script runs one of asynq's scripts, by its SHA or, when Redis does not
// have it cached yet (go-redis then falls back to the body), by its body:
// both paths hold an empty fetch and announce what fills a queue.
type script func(ctx context.Context, c redis.Cmdable) *redis.Cmd

func (c asynqClient) EvalSha(ctx context.Context, sha1 string, keys []string, args ...any) *redis.Cmd {
	return c.run(ctx, keys, func(ctx context.Context, r redis.Cmdable) *redis.Cmd { return r.EvalSha(ctx, sha1, keys, args...) })
}

func (c asynqClient) Eval(ctx context.Context, body string, keys []string, args ...any) *redis.Cmd {
	return c.run(ctx, keys, func(ctx context.Context, r redis.Cmdable) *redis.Cmd { return r.Eval(ctx, body, keys, args...) })
}

func (c asynqClient) run(ctx context.Context, keys []string, s script) *redis.Cmd {
	l, _ := ctx.Value(leadKey{}).(*Lead)
	if l != nil && l.cmds != nil {
		l = nil // sent with the first try, which Redis answered NOSCRIPT
	}
	if l == nil && IsFetch(keys) {
		return c.fetch(ctx, keys[0], s)
	}
	pending, counted := fills(keys)
	if _, cluster := c.UniversalClient.(*redis.ClusterClient); cluster && l != nil {
		// A cluster pipeline goes out per node, in no set order: the lead
		// must land first, so it takes its own round trip.
		if err := c.w.Do(ctx, func(ctx context.Context, p redis.Pipeliner) { l.cmds = l.queue(ctx, p) }); err != nil {
			return ErrCmd(ctx, err)
		}
		if err := l.Err(); err != nil {
			return ErrCmd(ctx, err)
		}
		l = nil
	}
	var piped *redis.Cmd
	if err := c.w.Do(ctx, func(ctx context.Context, p redis.Pipeliner) {
		if l != nil {
			l.cmds = l.queue(ctx, p)
		}
		piped = s(ctx, p)
	}); err != nil {
		return ErrCmd(ctx, err)
	}
	if pending != "" && piped.Err() == nil {
		// A forward wakes fetches only when it moved tasks: the forwarders
		// run every few seconds on every process.
		if n, err := piped.Int64(); !counted || (err == nil && n > 0) {
			c.w.announce(pending)
		}
	}
	return piped
}

// IsFetch tells asynq's dequeue script by its keys (pending, paused,
// active, lease).
func IsFetch(keys []string) bool {
	return len(keys) == 4 && strings.HasSuffix(keys[0], ":pending") && strings.HasSuffix(keys[1], ":paused")
}
