package engine

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/hibiken/asynq"
)

// Stops carries asynq's word on why it stopped a run. asynq cancels a
// task's context both when asked to (CancelProcessing: bgjobs' own cancel,
// asynqmon's) and when the run's lease lapsed (the process could not reach
// Redis to renew it for 30 s, or stalled); only the error handler it calls
// as it moves on tells the two apart. A cancel ends the job; a lapsed lease
// means asynq runs the task again, and the job must wait for that run: a
// 40 s Redis stall once ended every running job "cancelled".
type Stops struct {
	mu    sync.Mutex
	words map[string]*stopWord
}

type stopWord struct {
	ch chan error
	at time.Time
}

// stopWordKept bounds how long a word nobody asked for is kept (a run
// asynq stopped just as it returned on its own).
const stopWordKept = time.Minute

// HandleError is asynq's error handler: it keeps the word on a stopped run
// (context.Canceled or asynq.ErrLeaseExpired) for Why.
func (s *Stops) HandleError(ctx context.Context, _ *asynq.Task, err error) {
	if !errors.Is(err, asynq.ErrLeaseExpired) && !errors.Is(err, context.Canceled) {
		return
	}
	if id, ok := asynq.GetTaskID(ctx); ok {
		select {
		case s.word(id).ch <- err:
		default:
		}
	}
}

// Why waits up to wait for asynq's word on why it stopped the run of task
// id, which asynq gives just as the run's context ends; nil if none came.
func (s *Stops) Why(id string, wait time.Duration) error {
	w := s.word(id)
	defer func() {
		s.mu.Lock()
		delete(s.words, id)
		s.mu.Unlock()
	}()
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case err := <-w.ch:
		return err
	case <-t.C:
		return nil
	}
}

// word is id's slot, made by whichever of HandleError and Why comes first.
func (s *Stops) word(id string) *stopWord {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.words == nil {
		s.words = map[string]*stopWord{}
	}
	w := s.words[id]
	if w == nil {
		now := time.Now()
		for k, old := range s.words {
			if now.Sub(old.at) > stopWordKept {
				delete(s.words, k)
			}
		}
		w = &stopWord{ch: make(chan error, 1), at: now}
		s.words[id] = w
	}
	return w
}
