package registry

import (
	"errors"
	"fmt"

	"github.com/bgjobs/bgjobs"
)

// Script outcomes, decoded once here from each script's return codes.
var (
	// ErrNoJob: there is no such row (never was, deleted, or expired).
	ErrNoJob = errors.New("no such job")
	// ErrEnded: the job already ended; a state change was a no-op.
	ErrEnded = errors.New("job already ended")
	// ErrNotEnded: the job is still queued or running.
	ErrNotEnded = errors.New("job has not ended")
	// ErrCompleted: a completed job is retried only with force.
	ErrCompleted = errors.New("job completed")
)

// unavailable wraps a Redis failure as the 503 a client can retry.
func unavailable(op string, err error) error {
	if err == nil {
		return nil
	}
	return &bgjobs.Error{Code: bgjobs.EUnavailable, Message: fmt.Sprintf("%s: redis: %v", op, err)}
}
