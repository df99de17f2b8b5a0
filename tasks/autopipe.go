package tasks

import (
	"context"
	"errors"
	"strings"

	"github.com/redis/go-redis/v9"
)

// autoPipe coalesces the registry's commands issued at the same moment by
// many goroutines (API handlers, workers) into one pipeline per round trip.
// With nothing else in flight a command goes out at once, alone, so an idle
// system pays no latency; under load, whatever queues while one pipeline is
// on the wire goes in the next, and a busy process makes a fraction of the
// round trips. Round trips, not Redis work, bound a job queue on a small
// machine.
type autoPipe struct {
	rdb redis.UniversalClient
	ch  chan *pipeReq
}

type pipeReq struct {
	queue func(ctx context.Context, p redis.Pipeliner)
	done  chan struct{}
}

const (
	// autoPipeLoops pipelines may be in flight at once.
	autoPipeLoops = 4
	// autoPipeMax caps the requests sent in one pipeline.
	autoPipeMax = 128
)

func newAutoPipe(rdb redis.UniversalClient) *autoPipe {
	a := &autoPipe{rdb: rdb, ch: make(chan *pipeReq, 4*autoPipeMax)}
	for range autoPipeLoops {
		go a.loop()
	}
	return a
}

// do runs the commands queue adds, in a pipeline shared with concurrent
// callers, and returns once their replies are in the commands. The caller
// reads its own commands' results and errors. If ctx ends first, do returns
// ctx.Err() and the commands still run.
func (a *autoPipe) do(ctx context.Context, queue func(ctx context.Context, p redis.Pipeliner)) error {
	r := &pipeReq{queue: queue, done: make(chan struct{})}
	select {
	case a.ch <- r:
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case <-r.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// script runs s with keys and args through the shared pipeline. A server
// that has not seen the script yet (a fresh or restarted Redis) answers
// NOSCRIPT inside the pipeline; the call then goes out alone with Run,
// which loads it.
func (a *autoPipe) script(ctx context.Context, s *redis.Script, keys []string, args ...any) *redis.Cmd {
	var cmd *redis.Cmd
	if err := a.do(ctx, func(ctx context.Context, p redis.Pipeliner) { cmd = s.EvalSha(ctx, p, keys, args...) }); err != nil {
		return errCmd(ctx, err)
	}
	if err := cmd.Err(); err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT") {
		return s.Run(ctx, a.rdb, keys, args...)
	}
	return cmd
}

func (a *autoPipe) loop() {
	for first := range a.ch {
		batch := []*pipeReq{first}
	gather:
		for len(batch) < autoPipeMax {
			select {
			case r := <-a.ch:
				batch = append(batch, r)
			default:
				break gather
			}
		}
		ctx := context.Background()
		// Per-command errors land in each command; Exec's own error is the
		// first of them, so it is not needed here.
		_, _ = a.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, r := range batch {
				r.queue(ctx, p)
			}
			return nil
		})
		for _, r := range batch {
			close(r.done)
		}
	}
}

// leadKey carries, in a context, commands that must go out in the same
// pipeline as the next script call made with that context, just before it.
type leadKey struct{}

type lead struct {
	queue func(ctx context.Context, p redis.Pipeliner) []redis.Cmder
	// cmds are the lead's commands once queued; read them only after the
	// script call returned without a context error.
	cmds []redis.Cmder
}

// err is the first error of the lead's commands, or errNotSent if the
// script call never reached Redis.
func (l *lead) err() error {
	if l.cmds == nil {
		return errNotSent
	}
	for _, c := range l.cmds {
		if err := c.Err(); err != nil {
			return err
		}
	}
	return nil
}

var errNotSent = errors.New("not sent")

// withLead returns ctx carrying l for pipedScripts.
func withLead(ctx context.Context, l *lead) context.Context {
	return context.WithValue(ctx, leadKey{}, l)
}

// pipedScripts is the Redis client asynq runs on. Its scripts (enqueue,
// done, retry) share the registry's pipelines instead of taking a round
// trip each; only the fetch, which one loop repeats back to back, goes
// straight out. A script call whose context carries a lead (a spawn's new
// row) goes out right after the lead's commands: the row and its task cost
// one round trip, and the row is written before the task can be fetched (a
// pipeline to one node runs in order).
// Every other command goes straight to the embedded client.
type pipedScripts struct {
	redis.UniversalClient
	ap *autoPipe
}

func (c pipedScripts) EvalSha(ctx context.Context, sha1 string, keys []string, args ...any) *redis.Cmd {
	l, _ := ctx.Value(leadKey{}).(*lead)
	if l == nil && isFetch(keys) {
		return c.UniversalClient.EvalSha(ctx, sha1, keys, args...)
	}
	if _, cluster := c.UniversalClient.(*redis.ClusterClient); cluster && l != nil {
		// A cluster pipeline goes out per node, in no set order: the lead
		// must land first, so it takes its own round trip.
		if err := c.ap.do(ctx, func(ctx context.Context, p redis.Pipeliner) { l.cmds = l.queue(ctx, p) }); err != nil {
			return errCmd(ctx, err)
		}
		if err := l.err(); err != nil {
			return errCmd(ctx, err)
		}
		return c.UniversalClient.EvalSha(ctx, sha1, keys, args...)
	}
	var piped *redis.Cmd
	if err := c.ap.do(ctx, func(ctx context.Context, p redis.Pipeliner) {
		if l != nil {
			l.cmds = l.queue(ctx, p)
		}
		piped = p.EvalSha(ctx, sha1, keys, args...)
	}); err != nil {
		return errCmd(ctx, err)
	}
	return piped
}

func errCmd(ctx context.Context, err error) *redis.Cmd {
	cmd := redis.NewCmd(ctx)
	cmd.SetErr(err)
	return cmd
}

// isFetch tells asynq's dequeue script by its keys (pending, paused,
// active, lease).
func isFetch(keys []string) bool {
	return len(keys) == 4 && strings.HasSuffix(keys[1], ":paused")
}
