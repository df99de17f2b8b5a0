package engine

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/hibiken/asynq"
)

// asynq's word on a stopped run reaches Why whether it comes before the
// run asks or while it waits; no word is nil once the wait is over; words
// nobody asked for are dropped after a minute, and only a cancel's or a
// lapsed lease's word is kept.
func TestStopWords(t *testing.T) {
	var s Stops
	if err := s.Why("bg-000000000001", 20*time.Millisecond); err != nil {
		t.Fatalf("no word: got %v", err)
	}
	s.word("bg-000000000002").ch <- asynq.ErrLeaseExpired
	if err := s.Why("bg-000000000002", time.Second); !errors.Is(err, asynq.ErrLeaseExpired) {
		t.Fatalf("a word that came first: got %v", err)
	}
	go func() {
		time.Sleep(20 * time.Millisecond)
		s.word("bg-000000000003").ch <- context.Canceled
	}()
	if err := s.Why("bg-000000000003", 10*time.Second); !errors.Is(err, context.Canceled) {
		t.Fatalf("a word that came while waiting: got %v", err)
	}
	if len(s.words) != 0 {
		t.Fatalf("asked-for words are forgotten: %v", s.words)
	}

	s.HandleError(context.Background(), nil, asynq.ErrLeaseExpired) // no task id
	if len(s.words) != 0 {
		t.Fatalf("a word without a task is not kept: %v", s.words)
	}
	s.word("bg-000000000004").at = time.Now().Add(-2 * stopWordKept)
	s.word("bg-000000000005")
	if _, ok := s.words["bg-000000000004"]; ok || len(s.words) != 1 {
		t.Fatalf("a word nobody asked for goes after a minute: %v", s.words)
	}
}
