package registry

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bgjobs/bgjobs"
)

// PutAgent stores an agent's configuration.
func (s *Store) PutAgent(ctx context.Context, a *bgjobs.Agent) error {
	b, err := json.Marshal(a)
	if err != nil {
		return err
	}
	_, err = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, s.k.agent(a.Name), b, 0)
		p.SAdd(ctx, s.k.agents(), a.Name)
		return nil
	})
	return unavailable("store agent", err)
}

// GetAgent reads an agent's configuration; nil when none is stored.
func (s *Store) GetAgent(ctx context.Context, name string) (*bgjobs.Agent, error) {
	b, err := s.rdb.Get(ctx, s.k.agent(name)).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, unavailable("read agent", err)
	}
	var a bgjobs.Agent
	if err := json.Unmarshal(b, &a); err != nil {
		return nil, fmt.Errorf("agent %s: stored configuration is corrupt: %w", name, err)
	}
	return &a, nil
}

// ClaimSpawnKey records id under the agent's spawn Idempotency-Key for
// ttl, or returns the job an earlier spawn recorded there. A key whose job
// is gone (never written, deleted) is taken over.
func (s *Store) ClaimSpawnKey(ctx context.Context, agent, key, id string, ttl time.Duration) (*bgjobs.Job, error) {
	k := s.k.spawnIdem(agent, key)
	for range 3 {
		ok, err := s.rdb.SetNX(ctx, k, id, ttl).Result()
		if err != nil {
			return nil, unavailable("idempotency key", err)
		}
		if ok {
			return nil, nil
		}
		prior, err := s.rdb.Get(ctx, k).Result()
		if errors.Is(err, redis.Nil) {
			continue // expired between the two calls
		}
		if err != nil {
			return nil, unavailable("idempotency key", err)
		}
		j, err := s.Lookup(ctx, prior)
		if err != nil {
			return nil, err
		}
		if j != nil && j.Agent == agent {
			return j, nil
		}
		if err := s.rdb.Set(ctx, k, id, ttl).Err(); err != nil {
			return nil, unavailable("idempotency key", err)
		}
		return nil, nil
	}
	return nil, bgjobs.Errorf(bgjobs.EConflict, "idempotency key is being reused concurrently; retry")
}

// KeyDigest is how an agent key is stored: never the key itself.
func KeyDigest(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:])
}

// StoreKey stores an agent key's digest.
func (s *Store) StoreKey(ctx context.Context, agent, key string) error {
	return unavailable("store key", s.rdb.HSet(ctx, s.k.apiKeys(), KeyDigest(key), agent).Err())
}

// RevokeKeys removes every stored key of agent and reports how many.
func (s *Store) RevokeKeys(ctx context.Context, agent string) (int, error) {
	all, err := s.rdb.HGetAll(ctx, s.k.apiKeys()).Result()
	if err != nil {
		return 0, unavailable("read keys", err)
	}
	var gone []string
	for digest, a := range all {
		if a == agent {
			gone = append(gone, digest)
		}
	}
	if len(gone) == 0 {
		return 0, nil
	}
	if err := s.rdb.HDel(ctx, s.k.apiKeys(), gone...).Err(); err != nil {
		return 0, unavailable("revoke keys", err)
	}
	return len(gone), nil
}

// AgentOfKey returns the agent a stored key belongs to, or "".
func (s *Store) AgentOfKey(ctx context.Context, key string) (string, error) {
	a, err := s.rdb.HGet(ctx, s.k.apiKeys(), KeyDigest(key)).Result()
	if errors.Is(err, redis.Nil) {
		return "", nil
	}
	return a, unavailable("check key", err)
}

// KeyCount is how many agent keys are stored.
func (s *Store) KeyCount(ctx context.Context) (int64, error) {
	n, err := s.rdb.HLen(ctx, s.k.apiKeys()).Result()
	return n, unavailable("count keys", err)
}
