// Package tenants keeps who may use bgjobs and where it reaches them: each
// agent's configuration, the digests of the agent keys made with
// `bgjobs keys create`, and the console's sign-ins. Keys come from
// registry.Keys.
package tenants

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bgjobs/bgjobs"
	"github.com/bgjobs/bgjobs/tasks/internal/registry"
)

// Store holds agents and their keys.
type Store struct {
	rdb redis.UniversalClient
	k   registry.Keys
	// spawners are the agents NoteSpawner recorded from this process.
	spawners sync.Map
}

// New returns the tenant store on rdb with keys k.
func New(rdb redis.UniversalClient, k registry.Keys) *Store { return &Store{rdb: rdb, k: k} }

// PutAgent stores an agent's configuration.
func (s *Store) PutAgent(ctx context.Context, a *bgjobs.Agent) error {
	b, err := json.Marshal(a)
	if err != nil {
		return err
	}
	_, err = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, s.k.Agent(a.Name), b, 0)
		p.SAdd(ctx, s.k.Agents(), a.Name)
		return nil
	})
	return registry.Unavailable("store agent", err)
}

// GetAgent reads an agent's configuration; nil when none is stored.
func (s *Store) GetAgent(ctx context.Context, name string) (*bgjobs.Agent, error) {
	b, err := s.rdb.Get(ctx, s.k.Agent(name)).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, registry.Unavailable("read agent", err)
	}
	var a bgjobs.Agent
	if err := json.Unmarshal(b, &a); err != nil {
		return nil, fmt.Errorf("agent %s: stored configuration is corrupt: %w", name, err)
	}
	return &a, nil
}

// KeyDigest is how an agent key is stored: never the key itself.
func KeyDigest(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:])
}

// StoreKey stores an agent key's digest.
func (s *Store) StoreKey(ctx context.Context, agent, key string) error {
	return registry.Unavailable("store key", s.rdb.HSet(ctx, s.k.APIKeys(), KeyDigest(key), agent).Err())
}

// RevokeKeys removes every stored key of agent and reports how many.
func (s *Store) RevokeKeys(ctx context.Context, agent string) (int, error) {
	all, err := s.rdb.HGetAll(ctx, s.k.APIKeys()).Result()
	if err != nil {
		return 0, registry.Unavailable("read keys", err)
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
	if err := s.rdb.HDel(ctx, s.k.APIKeys(), gone...).Err(); err != nil {
		return 0, registry.Unavailable("revoke keys", err)
	}
	return len(gone), nil
}

// AgentOfKey returns the agent of the stored key whose digest (KeyDigest)
// is given, or "".
func (s *Store) AgentOfKey(ctx context.Context, digest string) (string, error) {
	a, err := s.rdb.HGet(ctx, s.k.APIKeys(), digest).Result()
	if errors.Is(err, redis.Nil) {
		return "", nil
	}
	return a, registry.Unavailable("check key", err)
}

// SignIn is a console sign-in: who it acts for, and the digest of the key
// it was made with, which must still be valid for it to be.
type SignIn struct {
	Agent     string
	Admin     bool
	KeyDigest string
}

// OpenSignIn stores a sign-in under token's digest for ttl.
func (s *Store) OpenSignIn(ctx context.Context, token string, in SignIn, ttl time.Duration) error {
	key := s.k.ConsoleSignIn(KeyDigest(token))
	admin := ""
	if in.Admin {
		admin = "1"
	}
	_, err := s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.HSet(ctx, key, "agent", in.Agent, "admin", admin, "key", in.KeyDigest)
		p.Expire(ctx, key, ttl)
		return nil
	})
	return registry.Unavailable("sign in", err)
}

// SignInOf returns the sign-in of token; false if there is none (never
// made, signed out, expired).
func (s *Store) SignInOf(ctx context.Context, token string) (SignIn, bool, error) {
	f, err := s.rdb.HGetAll(ctx, s.k.ConsoleSignIn(KeyDigest(token))).Result()
	if err != nil {
		return SignIn{}, false, registry.Unavailable("read sign-in", err)
	}
	if f["key"] == "" {
		return SignIn{}, false, nil
	}
	return SignIn{Agent: f["agent"], Admin: f["admin"] == "1", KeyDigest: f["key"]}, true, nil
}

// CloseSignIn ends token's sign-in.
func (s *Store) CloseSignIn(ctx context.Context, token string) error {
	return registry.Unavailable("sign out", s.rdb.Del(ctx, s.k.ConsoleSignIn(KeyDigest(token))).Err())
}

// KeyCount is how many agent keys are stored.
func (s *Store) KeyCount(ctx context.Context) (int64, error) {
	n, err := s.rdb.HLen(ctx, s.k.APIKeys()).Result()
	return n, registry.Unavailable("count keys", err)
}
