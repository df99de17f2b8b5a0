package registry

import (
	"errors"

	"github.com/bgjobs/bgjobs"
)

// Script outcomes, decoded once here from each script's return codes.
var (
	// ErrNoJob: there is no such row (never was, deleted, or expired).
	ErrNoJob = errors.New("no such job")
	// ErrClusterNode: REDIS_URL names one node of a Redis Cluster.
	ErrClusterNode = errors.New("REDIS_URL names one node of a Redis Cluster: use redis-cluster://host:port,host:port,…")
	// ErrEnded: the job already ended; a state change was a no-op.
	ErrEnded = errors.New("job already ended")
	// ErrNotEnded: the job is still queued or running.
	ErrNotEnded = errors.New("job has not ended")
	// ErrCompleted: a completed job is retried only with force.
	ErrCompleted = errors.New("job completed")
)

// codeErr maps the negative codes the scripts share to their errors: -1 no
// such row, -2 not ended, -3 completed (retry without force). Other codes
// are no error.
// CodeErr maps a script's negative answer to its error: -1 ErrNoJob, -2
// ErrNotEnded, -3 ErrCompleted; anything else is nil.
func CodeErr(code int64) error {
	switch code {
	case -1:
		return ErrNoJob
	case -2:
		return ErrNotEnded
	case -3:
		return ErrCompleted
	}
	return nil
}

// unavailable wraps a Redis failure as the 503 a client can retry.
func unavailable(op string, err error) error { return Unavailable(op, err) }

// Unavailable wraps a Redis failure as the 503 a client can retry; nil
// stays nil.
func Unavailable(op string, err error) error {
	if err == nil {
		return nil
	}
	return bgjobs.Unavailable(op, err)
}
