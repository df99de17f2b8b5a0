package pipeline

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Fetch waits. asynq polls: a fetch loop that finds its queue empty sleeps
// its check interval and asks again, so an idle process asks a few hundred
// times a second. With waits on, a fetch that finds its queue empty is held
// here instead, until a task may have arrived — a script of this process
// that put one in the queue, or a wake-up another process published — or
// the wait given to FetchWaits passes (Config.FetchWait), whichever is
// first; a wake-up asks again at once.
// The poll stays as the fallback for a wake-up that never comes (a task
// moved by a tool outside bgjobs, a pub/sub link down).
//
// A wake-up releases one held fetch, not all of them: a worker holds one
// fetch per fetch loop (twelve for work at concurrency 50), and waking
// every one for each task made a dozen fetches per task on every process
// of a fleet. The fetch that finds a task then passes the wake-up on to
// the next held fetch of its queue (a relay): one task costs a process
// about three fetches (the one that takes it, the one it passes the
// wake-up to, the taker's next), and a burst (a forward that moved many
// tasks, announced once) still reaches every loop, one round trip apart.

// wakeChannel is the pub/sub channel wake-ups travel on between processes:
// the message is the pending list's key.
const wakeChannel = "bgjobs:fetch-wake"

type waker struct {
	mu   sync.Mutex
	on   bool
	wait time.Duration
	// queues holds, per pending key, the fetches waiting on it, oldest
	// first; each channel is closed when its fetch should ask again.
	queues map[string][]chan struct{}
	// unpublished are the pending lists announced since the last publish.
	unpublished map[string]bool
	stopSub     context.CancelFunc
	subDone     chan struct{}
}

// hold registers a fetch of pending as waiting and returns what it waits
// on, and for how long; nil when waits are off. It is taken before the
// fetch runs, so a wake-up in between is not missed.
func (k *waker) hold(pending string) (chan struct{}, time.Duration) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if !k.on {
		return nil, 0
	}
	ch := make(chan struct{})
	k.queues[pending] = append(k.queues[pending], ch)
	return ch, k.wait
}

// leave unregisters a fetch that stops waiting (it found a task, or its
// wait ran out); a fetch already woken is no longer registered.
func (k *waker) leave(pending string, ch chan struct{}) {
	k.mu.Lock()
	defer k.mu.Unlock()
	waiting := k.queues[pending]
	if i := slices.Index(waiting, ch); i >= 0 {
		k.queues[pending] = slices.Delete(waiting, i, i+1)
	}
}

// wake releases the oldest fetch waiting on pending, if any.
func (k *waker) wake(pending string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	waiting := k.queues[pending]
	if len(waiting) == 0 {
		return
	}
	close(waiting[0])
	if len(waiting) == 1 {
		delete(k.queues, pending)
		return
	}
	k.queues[pending] = waiting[1:]
}

// FetchWaits turns fetch waits on, each at most wait (a worker starts: its
// fetches wait, and this process listens for other processes' wake-ups),
// or off with 0 (it stops: every held fetch returns at once, empty, so
// shutdown is not held up).
func (w *Writer) FetchWaits(wait time.Duration) {
	k := &w.waker
	on := wait > 0
	k.mu.Lock()
	k.wait = wait
	if k.on == on {
		k.mu.Unlock()
		return
	}
	k.on = on
	var stop context.CancelFunc
	var done chan struct{}
	if on {
		k.queues = map[string][]chan struct{}{}
		ctx, cancel := context.WithCancel(context.Background())
		k.stopSub, k.subDone = cancel, make(chan struct{})
		ps := w.rdb.Subscribe(ctx, wakeChannel)
		go w.listen(ctx, ps, k.subDone)
	} else {
		for _, waiting := range k.queues {
			for _, ch := range waiting {
				close(ch)
			}
		}
		k.queues = nil
		stop, done = k.stopSub, k.subDone
	}
	k.mu.Unlock()
	if stop != nil {
		stop()
		<-done
	}
}

// listen wakes this process's fetches for other processes' tasks.
func (w *Writer) listen(ctx context.Context, ps *redis.PubSub, done chan struct{}) {
	defer close(done)
	defer ps.Close()
	msgs := ps.Channel(redis.WithChannelHealthCheckInterval(time.Minute))
	for {
		select {
		case <-ctx.Done():
			return
		case m, ok := <-msgs:
			if !ok {
				return
			}
			if !w.tellers.told(m.Payload) {
				w.waker.wake(m.Payload)
			}
		}
	}
}

// fetch runs asynq's dequeue script on pending; when it finds the queue
// empty and waits are on, it holds the fetch as described above. A
// wake-up whose task another loop took first (or a process's own
// announcement echoed back by pub/sub) keeps the fetch held: returning
// empty would put the loop to sleep for its check interval. A fetch that
// comes back with a task passes the wake-up on, since more may wait.
func (c asynqClient) fetch(ctx context.Context, pending string, s script) *redis.Cmd {
	k := &c.w.waker
	ch, wait := k.hold(pending)
	cmd := c.dequeue(ctx, s)
	if ch == nil || k.answered(pending, ch, cmd) {
		return cmd
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	for {
		select {
		case <-ch:
			if ch, _ = k.hold(pending); ch == nil {
				return cmd // the worker stops: no new task
			}
			if cmd = c.dequeue(ctx, s); k.answered(pending, ch, cmd) {
				return cmd
			}
		case <-t.C:
			k.leave(pending, ch)
			return cmd
		}
	}
}

// dequeue sends one dequeue, in the writer's shared pipelines: a worker's
// fetch loops each take a round trip per task otherwise, and under load
// those round trips were the largest share of both this process's and
// Redis's CPU per job. Two cases go out alone: with replicas asked for,
// since the WAIT that ends a shared pipeline would fail a dequeue that had
// already moved its task to active (the task would sit there until its
// lease ran out); and once the writer has stopped, since asynq retries a
// failed dequeue at once, without its check interval's sleep.
func (c asynqClient) dequeue(ctx context.Context, s script) *redis.Cmd {
	if c.w.replicas > 0 {
		return s(ctx, c.UniversalClient)
	}
	var cmd *redis.Cmd
	err := c.w.Do(ctx, func(ctx context.Context, p redis.Pipeliner) { cmd = s(ctx, p) })
	switch {
	case errors.Is(err, ErrStopped):
		return s(ctx, c.UniversalClient)
	case err != nil:
		return ErrCmd(ctx, err)
	}
	return cmd
}

// answered ends the wait of a fetch whose dequeue did not come back empty:
// it stops waiting, and if it got a task, the next held fetch of the queue
// is woken, since more may wait.
func (k *waker) answered(pending string, ch chan struct{}, cmd *redis.Cmd) bool {
	if cmd.Err() == redis.Nil {
		return false
	}
	k.leave(pending, ch)
	if cmd.Err() == nil {
		k.wake(pending)
	}
	return true
}

// fills names the pending list an asynq script puts tasks in, if any:
// enqueue (task, pending) and requeue (active, lease, pending, task) do
// whenever they succeed; a forward (scheduled or retry, pending) only
// when it moved some, which its reply counts.
func fills(keys []string) (pending string, counted bool) {
	for i, key := range keys {
		if strings.HasSuffix(key, ":pending") {
			return key, i == 1 && (strings.HasSuffix(keys[0], ":scheduled") || strings.HasSuffix(keys[0], ":retry"))
		}
	}
	return "", false
}

// announce tells this process's fetches of pending at once that a task
// arrived, and other processes' through a publish on the follow-up lane.
// Publishes coalesce: a pending list announced again before its publish
// went out is published once, since a wake-up is relayed to every held
// fetch anyway. Under load one publish then stands for the tasks of a
// whole follow-up pipeline (0.1 a task in the batch joins, from 1.1):
// each publish is a message to every process of a fleet.
func (w *Writer) announce(pending string) {
	k := &w.waker
	k.wake(pending)
	k.mu.Lock()
	if k.unpublished == nil {
		k.unpublished = map[string]bool{}
	}
	first := len(k.unpublished) == 0
	k.unpublished[pending] = true
	k.mu.Unlock()
	if first && !w.add(w.publish) {
		k.mu.Lock()
		clear(k.unpublished) // the writer is not running: nothing to publish to
		k.mu.Unlock()
	}
}

// publish sends the announcements gathered since the last one.
func (w *Writer) publish(ctx context.Context, p redis.Pipeliner) {
	k := &w.waker
	k.mu.Lock()
	pending := slices.Collect(maps.Keys(k.unpublished))
	clear(k.unpublished)
	k.mu.Unlock()
	for _, key := range pending {
		Announce(ctx, p, key)
	}
}

// AnnounceQueue wakes the fetches held on an asynq queue, in this process
// and in others: for tasks moved there by a tool that announces nothing
// (asynqmon running a task or resuming a queue).
func (w *Writer) AnnounceQueue(queue string) { w.announce("asynq:{" + queue + "}:pending") }

// Announce tells every process's fetches of the pending list that a task
// arrived, for a move made outside asynq's client (a dead worker's
// re-queued task).
func Announce(ctx context.Context, c redis.Cmdable, pending string) {
	c.Publish(ctx, wakeChannel, pending)
}
