package registry

import (
	"context"
	"time"
)

// The global cap on running turns: a zset of job id → lease expiry.

// AcquireTurn takes (or renews) a slot of the global turn cap for a job,
// dropping lapsed slots first (acquireTurnCmd). It reports whether the
// job holds a slot.
func (s *Store) AcquireTurn(ctx context.Context, id string, now time.Time, lease time.Duration, limit int) (bool, error) {
	n, err := acquireTurnCmd.Run(ctx, s.rdb, []string{s.k.turnSem()}, id, now.UnixMilli(), now.Add(lease).UnixMilli(), limit).Int()
	return n == 1, err
}

// RenewTurn extends a job's held slot to expiry.
func (s *Store) RenewTurn(ctx context.Context, id string, expiry time.Time) error {
	return renewTurnCmd.Run(ctx, s.rdb, []string{s.k.turnSem()}, id, expiry.UnixMilli()).Err()
}

// ReleaseTurn frees a job's slot.
func (s *Store) ReleaseTurn(ctx context.Context, id string) {
	s.rdb.ZRem(ctx, s.k.turnSem(), id)
}
