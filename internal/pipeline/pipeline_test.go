package pipeline_test

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/bgjobs/bgjobs/internal/pipeline"
	"github.com/bgjobs/bgjobs/internal/testenv"
)

// recorder notes every EVALSHA the client sends, alone or in a pipeline.
type recorder struct {
	mu    sync.Mutex
	alone [][]string
	piped [][]string // one per pipelined command: its name, then its keys
}

func (r *recorder) DialHook(next redis.DialHook) redis.DialHook { return next }

func (r *recorder) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if keys, ok := evalKeys(cmd); ok {
			r.mu.Lock()
			r.alone = append(r.alone, keys)
			r.mu.Unlock()
		}
		return next(ctx, cmd)
	}
}

func (r *recorder) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		r.mu.Lock()
		for _, c := range cmds {
			if keys, ok := evalKeys(c); ok {
				r.piped = append(r.piped, append([]string{"evalsha"}, keys...))
			} else {
				r.piped = append(r.piped, []string{c.Name()})
			}
		}
		r.mu.Unlock()
		return next(ctx, cmds)
	}
}

// evalKeys returns the keys of an EVALSHA.
func evalKeys(cmd redis.Cmder) ([]string, bool) {
	args := cmd.Args()
	if len(args) < 3 || cmd.Name() != "evalsha" {
		return nil, false
	}
	n, _ := args[2].(int)
	keys := make([]string, 0, n)
	for _, k := range args[3 : 3+n] {
		s, _ := k.(string)
		keys = append(keys, s)
	}
	return keys, true
}

func (r *recorder) snapshot() (alone, piped [][]string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.alone), slices.Clone(r.piped)
}

// The fence around the asynq interception, against the pinned asynq: its
// enqueue goes out in the writer's pipeline right after a lead's commands
// (so a spawn's row is written before its task can be fetched), and its
// dequeue is recognised, so that an empty one can be held. If a new asynq changes either
// script's shape, this test fails before production does.
func TestAsynqScriptsAreRecognised(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	ctx := context.Background()
	rec := &recorder{}
	env.RDB.AddHook(rec)
	w := pipeline.New(env.RDB, slog.New(slog.DiscardHandler))
	require.NoError(t, w.Start(ctx))
	defer w.Stop()

	queue := env.Namespace + ":fence"
	marker := env.Namespace + ":lead"
	client := asynq.NewClientFromRedisClient(w.AsynqClient())
	leadCtx, lead := pipeline.WithLead(ctx, func(ctx context.Context, p redis.Pipeliner) []redis.Cmder {
		return []redis.Cmder{p.Set(ctx, marker, "row", time.Minute)}
	})
	_, err := client.EnqueueContext(leadCtx, asynq.NewTask("fence", nil, asynq.TaskID("t1"), asynq.Queue(queue)))
	require.NoError(t, err)
	require.NoError(t, lead.Err(), "the lead went out with the enqueue")
	require.Equal(t, "row", env.RDB.Get(ctx, marker).Val())
	_, piped := rec.snapshot()
	i := slices.IndexFunc(piped, func(c []string) bool { return c[0] == "set" })
	require.GreaterOrEqual(t, i, 0, "the lead was pipelined")
	require.Less(t, i+1, len(piped))
	require.Equal(t, "evalsha", piped[i+1][0], "the enqueue script follows the lead in the same pipeline")
	require.Equal(t, []string{"asynq:{" + queue + "}:t:t1", "asynq:{" + queue + "}:pending"}, piped[i+1][1:])
	require.False(t, pipeline.IsFetch(piped[i+1][1:]), "an enqueue is not taken for a fetch")

	done := make(chan struct{})
	srv := asynq.NewServerFromRedisClient(w.AsynqClient(), asynq.Config{Queues: map[string]int{queue: 1}, Concurrency: 1,
		TaskCheckInterval: 10 * time.Millisecond, LogLevel: asynq.FatalLevel})
	mux := asynq.NewServeMux()
	mux.HandleFunc("fence", func(context.Context, *asynq.Task) error { close(done); return nil })
	require.NoError(t, srv.Start(mux))
	defer srv.Shutdown()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("the task never ran")
	}
	require.Positive(t, rec.fetches(), "the dequeue was recognised as a fetch")
}

// Stop sends what Add queued, and Do after Stop fails rather than hangs.
func TestWriterStopFlushesAndRefuses(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	ctx := context.Background()
	w := pipeline.New(env.RDB, slog.New(slog.DiscardHandler))
	require.NoError(t, w.Start(ctx))
	key := env.Namespace + ":n"
	for range 500 {
		w.Add(func(ctx context.Context, p redis.Pipeliner) { p.Incr(ctx, key) })
	}
	w.Stop()
	require.Equal(t, "500", env.RDB.Get(ctx, key).Val())
	err := w.Do(ctx, func(ctx context.Context, p redis.Pipeliner) { p.Incr(ctx, key) })
	require.ErrorIs(t, err, pipeline.ErrStopped)
}

// twoProcesses is a worker process's writer, whose commands rec sees, and
// the writer of another process on the same Redis.
func twoProcesses(t *testing.T) (env *testenv.Env, w *pipeline.Writer, rec *recorder, other *pipeline.Writer) {
	t.Helper()
	env = testenv.New(t)
	opt, err := redis.ParseURL(env.URL)
	require.NoError(t, err)
	mine := redis.NewClient(opt) // the worker process's own client
	t.Cleanup(func() { _ = mine.Close() })
	rec = &recorder{}
	mine.AddHook(rec)
	w = pipeline.New(mine, slog.New(slog.DiscardHandler))
	other = pipeline.New(env.RDB, slog.New(slog.DiscardHandler))
	for _, p := range []*pipeline.Writer{w, other} {
		require.NoError(t, p.Start(context.Background()))
		t.Cleanup(p.Stop)
	}
	return env, w, rec, other
}

// fetches counts the dequeues sent so far, alone or in a shared pipeline.
func (r *recorder) fetches() int {
	alone, piped := r.snapshot()
	n := 0
	for _, keys := range alone {
		if pipeline.IsFetch(keys) {
			n++
		}
	}
	for _, c := range piped {
		if c[0] == "evalsha" && pipeline.IsFetch(c[1:]) {
			n++
		}
	}
	return n
}

// Fetch waits, against the pinned asynq: an idle server's fetch loop is
// held instead of polling, and a task is still picked
// up at once — enqueued by another process (its wake-up travels by
// pub/sub), by this one, or moved in by the forwarder from the delayed
// set. The wait here is a minute, so a missed wake-up cannot pass.
func TestFetchesWaitForWork(t *testing.T) {
	t.Parallel()
	env, w, rec, other := twoProcesses(t)
	ctx := context.Background()

	w.FetchWaits(time.Minute)
	queue := env.Namespace + ":wake"
	ran := make(chan string, 10)
	// A long check interval: a fetch that comes back empty sleeps 15–45 s,
	// so a wake-up sent before its task was there shows as a timeout.
	srv := asynq.NewServerFromRedisClient(w.AsynqClient(), asynq.Config{Queues: map[string]int{queue: 1}, Concurrency: 1,
		TaskCheckInterval: 30 * time.Second, DelayedTaskCheckInterval: time.Second, LogLevel: asynq.FatalLevel})
	mux := asynq.NewServeMux()
	mux.HandleFunc("wake", func(_ context.Context, t *asynq.Task) error { ran <- string(t.Payload()); return nil })
	require.NoError(t, srv.Start(mux))
	defer func() {
		w.FetchWaits(0)
		srv.Shutdown()
	}()
	time.Sleep(2 * time.Second)
	idle := rec.fetches()
	require.LessOrEqual(t, idle, 2, "held, not polling")

	expect := func(what string, enqueue func()) {
		t.Helper()
		start := time.Now()
		enqueue()
		select {
		case got := <-ran:
			require.Equal(t, what, got)
			t.Logf("%s: picked up after %s", what, time.Since(start).Round(time.Millisecond))
		case <-time.After(20 * time.Second):
			t.Fatalf("%s: not picked up: its wake-up was missed", what)
		}
	}
	remote, local := asynq.NewClientFromRedisClient(other.AsynqClient()), asynq.NewClientFromRedisClient(w.AsynqClient())
	if env.Mini != nil {
		// A Redis that has not cached asynq's scripts answers NOSCRIPT, and
		// go-redis sends the script's body instead: that path wakes too.
		// (Not on a shared real Redis: other tests use its cache.)
		require.NoError(t, env.RDB.ScriptFlush(ctx).Err())
	}
	expect("from another process", func() {
		_, err := remote.Enqueue(asynq.NewTask("wake", []byte("from another process"), asynq.Queue(queue)))
		require.NoError(t, err)
	})
	expect("from this process", func() {
		_, err := local.Enqueue(asynq.NewTask("wake", []byte("from this process"), asynq.Queue(queue)))
		require.NoError(t, err)
	})
	expect("delayed", func() {
		_, err := remote.Enqueue(asynq.NewTask("wake", []byte("delayed"), asynq.Queue(queue), asynq.ProcessIn(time.Second)))
		require.NoError(t, err)
	})
}

// Turning waits off releases a held fetch, so a worker's shutdown is not
// held up by the minute its idle fetch would otherwise wait.
func TestFetchWaitsReleaseOnShutdown(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	ctx := context.Background()
	w := pipeline.New(env.RDB, slog.New(slog.DiscardHandler))
	require.NoError(t, w.Start(ctx))
	defer w.Stop()
	w.FetchWaits(time.Minute)
	srv := asynq.NewServerFromRedisClient(w.AsynqClient(), asynq.Config{Queues: map[string]int{env.Namespace + ":stop": 1}, Concurrency: 1,
		TaskCheckInterval: 10 * time.Millisecond, ShutdownTimeout: time.Second, LogLevel: asynq.FatalLevel})
	require.NoError(t, srv.Start(asynq.HandlerFunc(func(context.Context, *asynq.Task) error { return nil })))
	time.Sleep(time.Second) // its fetch is held now
	start := time.Now()
	w.FetchWaits(0)
	srv.Shutdown()
	require.Less(t, time.Since(start), 30*time.Second, "shutdown did not wait out the held fetch")
}

// One task wakes one held fetch, not every loop's: the fetch that finds it
// passes the wake-up on, so a task costs a couple of fetches however many
// loops wait, and a burst announced once (a forward of delayed tasks)
// still reaches every loop. Eight servers of one slot each stand for a
// worker's fetch loops; an empty fetch sleeps 30 s, so a loop the relay
// missed would hold the burst up past the deadline.
func TestAWakeUpReleasesOneFetch(t *testing.T) {
	t.Parallel()
	env, w, rec, other := twoProcesses(t)
	w.FetchWaits(time.Minute)

	const loops = 8
	queue := env.Namespace + ":relay"
	var mu sync.Mutex
	running, most := 0, 0
	all := make(chan struct{})
	ran := make(chan string, 2*loops)
	handler := asynq.HandlerFunc(func(_ context.Context, task *asynq.Task) error {
		if string(task.Payload()) == "burst" {
			// Each burst task waits until every loop holds one.
			mu.Lock()
			running++
			most = max(most, running)
			if running == loops {
				close(all)
			}
			mu.Unlock()
			select {
			case <-all:
			case <-time.After(20 * time.Second):
			}
			mu.Lock()
			running--
			mu.Unlock()
		}
		ran <- string(task.Payload())
		return nil
	})
	var servers []*asynq.Server
	defer func() {
		// An empty fetch sleeps its 30 s check interval: stop them all at once.
		w.FetchWaits(0)
		var wg sync.WaitGroup
		for _, srv := range servers {
			wg.Go(srv.Shutdown)
		}
		wg.Wait()
	}()
	for range loops {
		srv := asynq.NewServerFromRedisClient(w.AsynqClient(), asynq.Config{Queues: map[string]int{queue: 1}, Concurrency: 1,
			TaskCheckInterval: 30 * time.Second, DelayedTaskCheckInterval: time.Second, ShutdownTimeout: time.Second,
			LogLevel: asynq.FatalLevel})
		require.NoError(t, srv.Start(handler))
		servers = append(servers, srv)
	}
	settled := func() int {
		// Every loop has fetched and is held once the count stops moving
		// (for a second: a fetch takes milliseconds, even on a loaded box).
		n := rec.fetches()
		for n < loops {
			time.Sleep(100 * time.Millisecond)
			n = rec.fetches()
		}
		for {
			time.Sleep(time.Second)
			m := rec.fetches()
			if m == n {
				return n
			}
			n = m
		}
	}
	remote, local := asynq.NewClientFromRedisClient(other.AsynqClient()), asynq.NewClientFromRedisClient(w.AsynqClient())
	one := func(what string, c *asynq.Client, most int) {
		t.Helper()
		before := settled()
		_, err := c.Enqueue(asynq.NewTask("relay", []byte(what), asynq.Queue(queue)))
		require.NoError(t, err)
		select {
		case got := <-ran:
			require.Equal(t, what, got)
		case <-time.After(20 * time.Second):
			t.Fatalf("%s: not picked up", what)
		}
		n := settled() - before
		t.Logf("%s: %d fetches with %d loops held", what, n, loops)
		require.LessOrEqual(t, n, most, "%s: one wake-up released more than one held fetch", what)
	}
	settled()
	// The fetch that takes the task, the one it passes the wake-up to
	// (which finds the queue empty), and the loop's next fetch once the
	// task is done. (Waking every held loop made loops+1.)
	one("from another process", remote, 3)
	// And one more: this process's own wake-up, echoed back by pub/sub.
	one("from this process", local, 4)

	for range loops {
		_, err := remote.Enqueue(asynq.NewTask("relay", []byte("burst"), asynq.Queue(queue), asynq.ProcessIn(time.Second)))
		require.NoError(t, err)
	}
	for range loops {
		select {
		case <-ran:
		case <-time.After(30 * time.Second):
			t.Fatal("the burst was not picked up")
		}
	}
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, loops, most, "the burst reached every held loop")
}

// Announcements made while a publish is still queued share it: a burst of
// tasks costs other processes a message or a few, not one each (the relay
// above takes a wake-up on to every held fetch).
func TestAnnouncementsShareAPublish(t *testing.T) {
	t.Parallel()
	_, w, rec, _ := twoProcesses(t)
	const burst = 500
	for range burst {
		w.AnnounceQueue("coalesce")
	}
	publishes := func() int {
		_, piped := rec.snapshot()
		n := 0
		for _, c := range piped {
			if c[0] == "publish" {
				n++
			}
		}
		return n
	}
	testenv.Eventually(t, 30*time.Second, "the burst published", func() bool { return publishes() > 0 })
	w.Stop() // sends whatever is still queued
	n := publishes()
	t.Logf("%d announcements, %d publishes", burst, n)
	require.Less(t, n, burst/5, "announcements did not share their publishes")
}
