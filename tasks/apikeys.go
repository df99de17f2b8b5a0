package tasks

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"

	"github.com/redis/go-redis/v9"

	"github.com/bgjobs/bgjobs"
)

// KeyDigest is how an agent key is stored: never the key itself.
func KeyDigest(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:])
}

// CreateKey makes a new key for agent, stores its digest and returns the
// key: the only time it is ever shown.
func (m *Manager) CreateKey(ctx context.Context, agent string) (string, error) {
	if err := bgjobs.CheckAgentName("agent", agent); err != nil {
		return "", err
	}
	var b [24]byte
	_, _ = rand.Read(b[:])
	key := "bgj_" + hex.EncodeToString(b[:])
	if err := m.rdb.HSet(ctx, m.k.apiKeys(), KeyDigest(key), agent).Err(); err != nil {
		return "", unavailable("store key", err)
	}
	return key, nil
}

// RevokeKeys removes every stored key of agent and reports how many.
func (m *Manager) RevokeKeys(ctx context.Context, agent string) (int, error) {
	all, err := m.rdb.HGetAll(ctx, m.k.apiKeys()).Result()
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
	if err := m.rdb.HDel(ctx, m.k.apiKeys(), gone...).Err(); err != nil {
		return 0, unavailable("revoke keys", err)
	}
	return len(gone), nil
}

// AgentOfKey returns the agent a stored key belongs to, or "".
func (m *Manager) AgentOfKey(ctx context.Context, key string) (string, error) {
	a, err := m.rdb.HGet(ctx, m.k.apiKeys(), KeyDigest(key)).Result()
	if errors.Is(err, redis.Nil) {
		return "", nil
	}
	if err != nil {
		return "", unavailable("check key", err)
	}
	return a, nil
}

// StoredKeyCount is how many keys are stored; a server with any requires
// keys even when none are configured in its environment.
func (m *Manager) StoredKeyCount(ctx context.Context) (int64, error) {
	return m.rdb.HLen(ctx, m.k.apiKeys()).Result()
}
