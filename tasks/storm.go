package tasks

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"time"
)

// The resume storm guard (BGJOBS_RESUME_COALESCE): a session's first
// singleton resume goes at once; those that follow within the window merge
// into one nudge sent at its end, listing every job. The merge queue lives
// in Redis and becomes an outbox entry, so a crash loses no nudge: the
// reconciler's sweep flushes what a dead process's timer would have.

// stormTimers holds one flush timer per session with a window open here.
type stormTimers struct {
	mu sync.Mutex
	t  map[string]*time.Timer
}

// stormGate reports whether a singleton resume goes now; if not, the job
// waits in the session's storm queue and a flush is scheduled.
func (m *Manager) stormGate(ctx context.Context, tag string, j *Job) (bool, error) {
	window := m.cfg.ResumeCoalesce
	n, err := stormCmd.Run(ctx, m.rdb, []string{m.k.stormWindow(tag), m.k.stormQueue(tag), m.k.job(tag, j.ID)},
		j.ID, m.now().UnixMilli(), window.Milliseconds(), j.Generation).Int64()
	if err != nil {
		return false, err
	}
	if n == 1 {
		m.scheduleFlush(tag, window)
		return true, nil
	}
	m.scheduleFlush(tag, time.Duration(-1-n)*time.Millisecond)
	return false, nil
}

// scheduleFlush arms this process's flush of a session's window, once.
func (m *Manager) scheduleFlush(tag string, after time.Duration) {
	m.storm.mu.Lock()
	defer m.storm.mu.Unlock()
	if m.storm.t == nil {
		m.storm.t = map[string]*time.Timer{}
	}
	if _, ok := m.storm.t[tag]; ok {
		return
	}
	m.storm.t[tag] = time.AfterFunc(after+time.Millisecond, func() {
		m.storm.mu.Lock()
		delete(m.storm.t, tag)
		m.storm.mu.Unlock()
		m.flushStorm(tag, false)
	})
}

// flushStorm turns a session's storm queue into one merged nudge.
func (m *Manager) flushStorm(tag string, force bool) {
	ctx := context.Background()
	res, err := stormFlushCmd.Run(ctx, m.rdb, []string{m.k.stormWindow(tag), m.k.stormQueue(tag), m.k.outbox(tag)},
		m.now().UnixMilli(), m.cfg.ResumeCoalesce.Milliseconds(), boolStr(force)).Slice()
	if err != nil || len(res) != 2 {
		m.log.Warn("resume storm flush; the sweep retries", slog.String("tag", tag), slog.Any("err", err))
		return
	}
	entry, _ := res[0].(string)
	if left, _ := res[1].(int64); left > 0 {
		// Redis' clock and ours disagree by a hair: come back at its end.
		m.scheduleFlush(tag, time.Duration(left)*time.Millisecond)
		return
	}
	if entry == "" {
		return
	}
	// The flush opened a new window: arm its own flush for what follows.
	m.scheduleFlush(tag, m.cfg.ResumeCoalesce)
	if err := m.pumpEntry(ctx, tag, entry, m.now().UnixMilli()); err != nil && !errors.Is(err, errAwaitingIndex) {
		m.log.Warn("merged resume; the sweep retries", slog.String("tag", tag), slog.Any("err", err))
	}
}

// sweepStorms flushes storm queues whose window has passed with no flush
// (the process that held the timer died).
func (m *Manager) sweepStorms(ctx context.Context) error {
	prefix := m.cfg.Namespace + ":{"
	iter := m.rdb.Scan(ctx, 0, m.k.stormPattern(), 500).Iterator()
	for iter.Next(ctx) {
		tag := strings.TrimSuffix(strings.TrimPrefix(iter.Val(), prefix), "}:stormq")
		m.flushStorm(tag, false)
	}
	return iter.Err()
}

// stopStorms stops this process's flush timers and flushes their windows
// now, so a graceful stop leaves nothing to the sweep.
func (m *Manager) stopStorms() {
	m.storm.mu.Lock()
	tags := make([]string, 0, len(m.storm.t))
	for tag, t := range m.storm.t {
		t.Stop()
		tags = append(tags, tag)
	}
	m.storm.t = nil
	m.storm.mu.Unlock()
	for _, tag := range tags {
		m.flushStorm(tag, true)
	}
}
