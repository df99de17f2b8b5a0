package engine

import (
	"errors"
	"testing"
	"time"
)

// A task sent back with LaterBy waits what it was given; with ErrLater
// alone, a second; a failure backs off.
func TestRetryDelay(t *testing.T) {
	for _, c := range []struct {
		n    int
		err  error
		want time.Duration
	}{
		{0, LaterBy(ErrLater, 7*time.Second), 7 * time.Second},
		{5, LaterBy(ErrRowBehind, 30*time.Second), 30 * time.Second},
		{0, ErrLater, time.Second},
		{3, ErrRowBehind, time.Second},
		{3, errors.New("boom"), 8 * time.Second},
	} {
		if got := retryDelay(c.n, c.err, nil); got != c.want {
			t.Errorf("retryDelay(%d, %v) = %s, want %s", c.n, c.err, got, c.want)
		}
	}
	if !errors.Is(LaterBy(ErrRowBehind, time.Second), ErrLater) {
		t.Error("LaterBy hides ErrLater")
	}
}
