// Package idem keeps spawn Idempotency-Keys: each agent's key names the
// first job spawned with it, for a day. Keys come from registry.Keys.
package idem

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bgjobs/bgjobs"
	"github.com/bgjobs/bgjobs/tasks/internal/registry"
)

// Store claims spawn keys.
type Store struct {
	rdb redis.UniversalClient
	k   registry.Keys
	// lookup finds a job by id (nil when there is none).
	lookup func(ctx context.Context, id string) (*bgjobs.Job, error)
}

// New returns the spawn keys on rdb with keys k; lookup finds a job by id.
func New(rdb redis.UniversalClient, k registry.Keys, lookup func(ctx context.Context, id string) (*bgjobs.Job, error)) *Store {
	return &Store{rdb: rdb, k: k, lookup: lookup}
}

// Claim records id under the agent's spawn Idempotency-Key for ttl, or
// returns the job an earlier spawn recorded there. A key whose job is gone
// (never written, deleted) is taken over. fingerprint identifies the
// request: a key reused for a different one is a conflict, not the other
// request's job.
func (s *Store) Claim(ctx context.Context, agent, key, id, fingerprint string, ttl time.Duration) (*bgjobs.Job, error) {
	k := s.k.SpawnIdem(agent, key)
	for range 3 {
		ok, err := s.rdb.SetNX(ctx, k, id+" "+fingerprint, ttl).Result()
		if err != nil {
			return nil, registry.Unavailable("idempotency key", err)
		}
		if ok {
			return nil, nil
		}
		prior, err := s.rdb.Get(ctx, k).Result()
		if errors.Is(err, redis.Nil) {
			continue // expired between the two calls
		}
		if err != nil {
			return nil, registry.Unavailable("idempotency key", err)
		}
		prior, fp, _ := strings.Cut(prior, " ")
		j, err := s.lookup(ctx, prior)
		if err != nil {
			return nil, err
		}
		if j != nil && j.Agent == agent {
			if fp != "" && fp != fingerprint {
				return nil, &bgjobs.Error{Code: bgjobs.EConflict, Field: "Idempotency-Key",
					Message: fmt.Sprintf("this key already started job %s with a different request; use a new key", j.ID)}
			}
			return j, nil
		}
		if err := s.rdb.Set(ctx, k, id+" "+fingerprint, ttl).Err(); err != nil {
			return nil, registry.Unavailable("idempotency key", err)
		}
		return nil, nil
	}
	return nil, bgjobs.Errorf(bgjobs.EConflict, "idempotency key is being reused concurrently; retry")
}
