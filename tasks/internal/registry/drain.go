package registry

import "context"

// PendingIDs lists up to n undrained jobs of a session, oldest first.
func (s *Store) PendingIDs(ctx context.Context, tag string, n int64) ([]string, error) {
	ids, err := s.rdb.ZRange(ctx, s.k.Pending(tag), 0, n-1).Result()
	return ids, unavailable("read pending", err)
}
