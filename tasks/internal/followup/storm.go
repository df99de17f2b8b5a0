package followup

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/bgjobs/bgjobs"
)

// The resume storm guard (BGJOBS_RESUME_COALESCE): a session's first
// singleton resume goes at once; those that follow within the window merge
// into one nudge sent at its end, listing every job. The window adapts:
// each completion in it keeps it open one base window longer, up to its
// cap (8 base windows at first), and each window that merged something
// doubles the next one's cap, up to BGJOBS_RESUME_COALESCE_MAX, so a burst
// however long is told of in a handful of nudges; a quiet window resets. The merge queue lives
// in Redis and becomes an outbox entry, so a crash loses no nudge: the
// maintenance sweep flushes what a dead process's timer would have.

// stormFirstCap is a new window's cap, in base windows.
const stormFirstCap = 8

// stormTimers holds this process's flush timer of each session with a
// window open here.
type stormTimers struct {
	f  *Followups
	mu sync.Mutex
	t  map[string]*time.Timer
	// stopped refuses new timers once Stop began.
	stopped bool
}

// Start allows timers to be armed.
func (s *stormTimers) Start(context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.t, s.stopped = map[string]*time.Timer{}, false
	return nil
}

// Stop stops the timers and flushes their windows now.
func (s *stormTimers) Stop() {
	s.mu.Lock()
	tags := make([]string, 0, len(s.t))
	for tag, t := range s.t {
		t.Stop()
		tags = append(tags, tag)
	}
	s.t, s.stopped = nil, true
	s.mu.Unlock()
	for _, tag := range tags {
		s.flush(tag, true)
	}
}

// gate reports whether a singleton resume goes now; if not, the job waits
// in the session's storm queue and a flush is scheduled.
func (s *stormTimers) gate(ctx context.Context, tag string, j *bgjobs.Job) (bool, error) {
	send, wait, err := s.f.wake.StormGate(ctx, tag, j.ID, j.Generation, s.f.now(), s.f.cfg.ResumeCoalesce, stormFirstCap*s.f.cfg.ResumeCoalesce)
	if err != nil {
		return false, err
	}
	s.schedule(tag, wait)
	return send, nil
}

// schedule arms this process's flush of a session's window, once.
func (s *stormTimers) schedule(tag string, after time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped || s.t == nil {
		return
	}
	if _, ok := s.t[tag]; ok {
		return
	}
	s.t[tag] = time.AfterFunc(after+time.Millisecond, func() {
		s.mu.Lock()
		delete(s.t, tag)
		s.mu.Unlock()
		s.flush(tag, false)
	})
}

// flush turns a session's storm queue into one merged nudge.
func (s *stormTimers) flush(tag string, force bool) {
	f := s.f
	ctx := context.Background()
	e, ok, left, err := f.wake.StormFlush(ctx, tag, f.now(), f.cfg.ResumeCoalesce, max(f.cfg.ResumeCoalesceMax, stormFirstCap*f.cfg.ResumeCoalesce), force)
	if err != nil {
		f.log.Warn("resume storm flush; the sweep retries", slog.String("tag", tag), slog.Any("err", err))
		return
	}
	if !ok {
		if left > 0 {
			// Redis' clock and ours disagree by a hair: come back at its end.
			s.schedule(tag, left)
		}
		return
	}
	// The flush opened a new window: arm its own flush for what follows.
	s.schedule(tag, left)
	if err := f.PumpEntry(ctx, tag, e); err != nil && !IsWaiting(err) {
		f.log.Warn("merged resume; the sweep retries", slog.String("tag", tag), slog.Any("err", err))
	}
}

// SweepStorms flushes storm queues whose window has passed with no flush
// (the process that held the timer died).
func (f *Followups) SweepStorms(ctx context.Context) error {
	return f.store.StormSessions(ctx, func(tag string) error {
		f.storm.flush(tag, false)
		return nil
	})
}

// SweepOutboxes moves on every session's outbox: what a crash between a
// settle and its pump left behind.
func (f *Followups) SweepOutboxes(ctx context.Context) error {
	return f.store.OutboxSessions(ctx, func(tag string) error { return f.Pump(ctx, tag) })
}
